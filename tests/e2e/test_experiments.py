"""specdec-exp end to end: sweeps run (basic and submitit_local launchers), an interrupted sweep
resumes without duplicates, the report holds its tables and plots, the wandb offline runs hold
the logged tables, the probe experiments run.

    pytest tests/e2e/test_experiments.py

Without a sweep: every config composes and the schema refuses bad values
(tests/cli/test_experiments_config.py); the report of a task without records and wandb's one-line
errors (tests/report/test_report.py).

Sweeps run `python -m experiments.run` in a subprocess on a random deepseek_v3 checkpoint
(model=random_deepseek_v3, built once into a per-session SPECDEC_CACHE) with 16 tokens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["model=random_deepseek_v3", "gamma=1,2", "drafter=self,oracle", "max_tokens=16"]


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["SPECDEC_CACHE"] = str(tmp_path_factory.mktemp("specdec-cache"))
    e["WANDB_SILENT"] = "true"
    return e


def specdec_exp(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", *args, "progress=false"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def job_dirs(sweep: Path) -> list[Path]:
    return sorted(p.parent for p in sweep.glob("*/result.json"))


@pytest.fixture(scope="session")
def basic_sweep(tmp_path_factory, env) -> Path:
    sweep = tmp_path_factory.mktemp("basic") / "sweep"
    out = specdec_exp([*SWEEP, "logger=wandb_offline", f"hydra.sweep.dir={sweep}"], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"report:  {sweep}/report/report.md" in out.stdout
    return sweep


def test_basic_multirun_writes_four_jobs(basic_sweep):
    dirs = job_dirs(basic_sweep)
    assert [d.name for d in dirs] == [
        "drafter=oracle,gamma=1,max_tokens=16,model=random_deepseek_v3",
        "drafter=oracle,gamma=2,max_tokens=16,model=random_deepseek_v3",
        "drafter=self,gamma=1,max_tokens=16,model=random_deepseek_v3",
        "drafter=self,gamma=2,max_tokens=16,model=random_deepseek_v3",
    ]
    for d in dirs:
        cfg = json.loads((d / "config.json").read_text())
        meta = cfg["meta"]
        assert meta["seed"] == 0 and meta["device_profile"]["name"] == "m4-24gb"
        assert meta["versions"]["mlx"] and meta["blas"]
        records = [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()]
        assert sum(r["committed"] for r in records) == 15  # the prefill commits the first
        assert [r["pass_idx"] for r in records] == list(range(len(records)))
        assert all(r["gamma"] == cfg["config"]["gamma"] for r in records)
        summary = json.loads((d / "summary.json").read_text())
        assert summary["headline"]["name"] == "mean_union"
    # the plain jobs measured the union along their trace, γ = 1..8
    trace = json.loads((dirs[0] / "trace_union.json").read_text())
    assert sorted(map(int, trace["union"])) == list(range(1, 9))
    assert trace["union"]["1"]["mean"] == 4.0  # top-4 model: one position selects 4 experts
    assert 0.0 <= trace["consecutive_overlap"] <= 1.0


def test_wandb_offline_runs_hold_tables(basic_sweep):
    for d in job_dirs(basic_sweep):
        (run,) = (d / "wandb").glob("offline-run-*")
        tables = [p.name for p in (run / "files" / "media" / "table").glob("*.table.json")]
        assert any(t.startswith("union_per_layer") for t in tables)
    (report_run,) = (basic_sweep / "report" / "wandb").glob("offline-run-*")
    names = {p.name.split("_")[0] for p in (report_run / "files/media/table").glob("*.json")}
    assert {"jobs", "union", "fits", "speedup", "verify"} <= names
    table = next((report_run / "files/media/table").glob("verify_vs_trace*.json"))
    rows = json.loads(table.read_text())
    assert rows["columns"][:2] == ["drafter", "gamma"] and len(rows["data"]) == 2


def test_report_holds_tables_and_plots(basic_sweep):
    from specdec.costmodel.union import fit_linear

    report = basic_sweep / "report"
    md = (report / "report.md").read_text()
    for section in ("### (a) Union vs γ", "### (b) Speedup vs acceptance", "### (c) Real verify"):
        assert section in md
    images = [
        line.split("](")[1].rstrip(")\n") for line in md.splitlines() if line.startswith("![")
    ]
    assert sorted(images) == sorted(p.name for p in report.glob("*.png"))
    assert len(images) == 5  # trace, two drafters' verify unions, speedup, verify vs trace
    for name in images:
        data = (report / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    tables = {p.stem: json.loads(p.read_text()) for p in (report / "tables").glob("*.json")}
    assert len(tables["jobs"]) == 4
    trace = tables["union_trace"]
    assert [r["gamma"] for r in trace] == list(range(1, 9))
    slope = fit_linear({r["gamma"]: r["mean_union"] for r in trace}, k=4).slope
    fits = [r["fit"] for r in tables["fits_trace"]]
    assert fits[0] == f"linear: k(1+{slope:.3f}(γ−1))"
    assert any("measured" in f for f in fits)  # the overlap model at the measured ρ

    # measured speedup = plain bytes per token / the job's, straight from the records
    def bytes_per_token(name: str) -> float:
        rows = (basic_sweep / name / "records.jsonl").read_text().splitlines()
        recs = [json.loads(r) for r in rows]
        read = sum(r["draft_bytes_read"] + r["verify_bytes_read"] for r in recs)
        return read / sum(r["committed"] for r in recs)

    tail = ",max_tokens=16,model=random_deepseek_v3"
    plain = (
        bytes_per_token(f"drafter=oracle,gamma=1{tail}")
        + bytes_per_token(f"drafter=self,gamma=1{tail}")
    ) / 2
    (point,) = [r for r in tables["speedup_points"] if r["drafter"] == "self"]
    assert point["speedup_bytes"] == pytest.approx(
        plain / bytes_per_token(f"drafter=self,gamma=2{tail}")
    )
    assert {r["gamma"] for r in tables["gamma_costs"]} == {1, 2}
    assert [r["alpha"] for r in tables["best_gamma"]] == [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0]


def test_submitit_local_multirun(tmp_path, env):
    sweep = tmp_path / "sweep"
    args = [
        *SWEEP,
        "logger=disabled",
        f"hydra.sweep.dir={sweep}",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
    ]
    out = specdec_exp(args, env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(job_dirs(sweep)) == 4
    assert len(json.loads((sweep / "report/tables/jobs.json").read_text())) == 4
    assert list(sweep.glob(".submitit/*/*_result.pkl"))  # the jobs ran through submitit


def test_interrupted_sweep_resumes_without_duplicates(tmp_path, env):
    sweep = tmp_path / "sweep"
    args = [*SWEEP[:-1], "max_tokens=24", "logger=disabled", f"hydra.sweep.dir={sweep}"]
    cmd = [sys.executable, "-m", "experiments.run", "-m", *args, "progress=false"]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    partial = sweep / f"drafter=self,gamma=2,max_tokens=24,{SWEEP[0]}" / "records.jsonl"
    try:
        # kill the third job after two of its passes: mid-decode, its kernels already compiled
        # (a kill inside MLX's CPU kernel compilation can leave MLX's own cache broken)
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if partial.exists() and len(partial.read_text().splitlines()) >= 2:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)  # hold it there while a second identical sweep starts
        second = specdec_exp(args, env)
        assert second.returncode != 0 and "Traceback" not in second.stderr
        assert (
            second.stderr.strip()
            .splitlines()[-1]
            .startswith(f"specdec-exp: error: sweep directory {sweep} is in use by another process")
        )
        assert not (sweep / "report").exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {d.name: (d / "result.json").read_text() for d in job_dirs(sweep)}
    assert len(before) == 2, "the sweep must be cut short in its third job"
    assert not (partial.parent / "result.json").exists()

    out = specdec_exp(args, env)
    assert out.returncode == 0, out.stderr[-3000:]
    after = job_dirs(sweep)
    assert len(after) == 4
    for d in after:
        if d.name in before:  # finished before the kill: skipped, marker untouched
            assert (d / "result.json").read_text() == before[d.name]
        idx = [
            json.loads(line)["pass_idx"] for line in (d / "records.jsonl").read_text().splitlines()
        ]
        assert idx == list(range(len(idx)))  # one run's passes, none twice
    assert out.stdout.count("finished before, skipped") == len(before)
    jobs = json.loads((sweep / "report/tables/jobs.json").read_text())
    assert sorted((r["drafter"], r["gamma"]) for r in jobs) == [
        ("oracle:0.9", 1),
        ("oracle:0.9", 2),
        ("self", 1),
        ("self", 2),
    ]


def test_report_keeps_one_job_per_config(basic_sweep, tmp_path):
    """A job directory copied under another name (same config hash) is one job, not two."""
    import shutil

    from specdec.report.collect import collect_jobs

    copy = tmp_path / "sweep"
    shutil.copytree(basic_sweep, copy, ignore=shutil.ignore_patterns("report", "wandb"))
    first = job_dirs(copy)[0]
    shutil.copytree(first, copy / "again")
    assert len(collect_jobs(copy)) == 4


def test_probe_experiments(tmp_path, env):
    """eviction, lookahead and read_path run the probes; the report shows their tables."""
    sweep = tmp_path / "sweep"
    for experiment in ("eviction", "lookahead", "read_path"):
        # one sweep per experiment: `experiment=a,b` would also take main's γ × drafter grid
        args = [
            f"experiment={experiment}",
            "model=random_deepseek_v3",
            "max_tokens=8",
            "+task.options.limit=2",
            "logger=disabled",
            f"hydra.sweep.dir={sweep}",
        ]
        out = specdec_exp(args, env)
        assert out.returncode == 0, out.stderr[-3000:]
    heads = {}
    for d in job_dirs(sweep):
        summary = json.loads((d / "summary.json").read_text())
        heads[summary["headline"]["name"]] = summary["headline"]["value"]
        (table,) = (d / "tables").glob("*.json")
        assert json.loads(table.read_text())  # the probe's rows
    assert set(heads) == {"lru_minus_knapsack_bound", "recall_decode_2_ahead", "best_gbps"}
    assert -1 <= heads["lru_minus_knapsack_bound"] <= 1 and heads["best_gbps"] > 0
    md = (sweep / "report" / "report.md").read_text()
    assert md.count("### eviction") == md.count("### lookahead") == md.count("### read_path") == 1


def test_run_dir_on_a_users_folder_is_refused(tmp_path, env):
    """`hydra.run.dir=DIR` on a folder of the user's once deleted DIR/tables/mydata.json and
    overwrote DIR/config.json: now one line, and the user's files stay as they were."""
    user = tmp_path / "DIR"
    (user / "tables").mkdir(parents=True)
    mine = {"tables/mydata.json": "[1, 2]", "config.json": "my config", "summary.json": "mine"}
    for name, text in mine.items():
        (user / name).write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "experiments.run", "experiment=union_cost", "logger=disabled"]
        + [f"hydra.run.dir={user}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"specdec-exp: error: {user} holds files specdec-exp did not write (config.json, "
        "summary.json, tables; no .specdec-run marker); give hydra.run.dir a new or empty "
        "directory"
    )
    assert {n: (user / n).read_text() for n in mine} == mine
