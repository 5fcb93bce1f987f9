"""specdec-exp end to end: every config composes, sweeps run (basic and submitit_local
launchers), an interrupted sweep resumes without duplicates, the report holds its tables and
plots, the wandb offline runs hold the logged tables.

    pytest tests/test_experiments.py

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
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from experiments.config import Config, register, to_config
from experiments.jobs import config_hash
from experiments.run import slug
from specdec.core.errors import SpecdecError
from specdec.gamma.spec import Gamma

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# groups whose option leaves a value to the user (???): the value the test passes
REQUIRED = {
    "model/path": ["model.path=/models/x"],
    "drafter/draft": ["drafter.path=/models/small"],
    "cache/static": ["cache.hotlist=/profiles/hot.txt"],
    "device/file": ["device.profile=/profiles/mac.yaml"],
}
SWEEP = ["model=random_deepseek_v3", "gamma=1,2", "drafter=self,oracle", "max_tokens=16"]


def _options() -> list[tuple[str, str]]:
    return [
        (g.name, f.stem)
        for g in sorted(CONF.iterdir())
        if g.is_dir()
        for f in sorted(g.glob("*.yaml"))
    ]


@pytest.mark.parametrize(("group", "option"), _options())
def test_every_config_composes(group, option):
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        extra = REQUIRED.get(f"{group}/{option}", [])
        cfg = compose("config", [f"{group}={option}", *extra], return_hydra_config=True)
        typed = to_config(cfg)
    assert isinstance(typed, Config)
    if group == "experiment":
        assert (ROOT / "experiments" / "tasks" / f"{typed.task.name}.py").exists()
    else:
        assert cfg.hydra.runtime.choices[group] == option


@pytest.mark.parametrize("launcher", ["basic", "joblib", "submitit_local", "submitit_slurm"])
def test_documented_launchers_compose(launcher):
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["hydra/launcher"] == launcher


def test_schema_rejects_unknown_keys_and_wrong_types():
    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=["gama=4"])
        # γ is an int or "auto": any other text is refused when the typed config is made
        with pytest.raises(SpecdecError, match="gamma 'four'"):
            to_config(compose("config", overrides=["gamma=four"]))
        assert to_config(compose("config", overrides=["gamma=auto"])).gamma.auto
        assert to_config(compose("config", overrides=["gamma=3"])).gamma == Gamma(3)


def test_slug_and_hash():
    assert slug("drafter=oracle,model.path=/a b/c") == "drafter=oracle,model.path=_a_b_c"
    long_a, long_b = slug("model.path=" + "x" * 200 + "a"), slug("model.path=" + "x" * 200 + "b")
    assert len(long_a) <= 120 and long_a != long_b
    base = {"gamma": 2, "logger": {"mode": "offline"}, "sweep": "a"}
    same = {"gamma": 2, "logger": {"mode": "disabled"}, "sweep": "b"}
    assert config_hash(base) == config_hash(same)  # where it logs is not what it measures
    assert config_hash(base) != config_hash({**base, "gamma": 4})


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


def test_wandb_online_without_credentials_is_one_clear_error(tmp_path, monkeypatch):
    from specdec.core.errors import SpecdecError
    from specdec.report.wandb_sink import WandbSink

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login
    with pytest.raises(SpecdecError, match="wandb login"):
        WandbSink("online", tmp_path, name="x")
    with pytest.raises(SpecdecError, match="offline, online, disabled"):
        WandbSink("cloud", tmp_path, name="x")


def test_report_shows_tasks_without_records(tmp_path):
    """A task that does not decode (a probe) is reported by its own tables and figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.tasks import TaskResult
    from specdec.report import build_report, rundir

    run_dir = tmp_path / "sweep" / "task.options.budgets=[0.1]"
    run_dir.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([0.1, 0.2], [0.5, 0.6])
    fig.savefig(run_dir / "eviction.png")
    rows = [{"policy": "lru", "budget_share": 0.1, "hit_rate": 0.53}]
    result = TaskResult(
        "hit_rate", 0.53, {"rows": 1}, {"eviction": rows}, [run_dir / "eviction.png"]
    )
    card = rundir.JobCard("eviction", "none", 1, "m4-24gb", {"model": "tiny"}, "tiny")
    meta = {"config_hash": "abc", "sweep": "probe", "versions": {}}
    rundir.write_card(run_dir, {"opaque": "harness config"}, meta, card)
    rundir.write_outputs(run_dir, result)
    rundir.mark_done(run_dir, "abc", result, 1.0)

    report = build_report(tmp_path / "sweep", wandb_mode="disabled")
    md = report.markdown.read_text()
    assert "## Other tasks" in md and "| lru | 0.1 | 0.53 |" in md
    assert "![eviction](../task.options.budgets=[0.1]/eviction.png)" in md
    assert report.tables == {"task.options.budgets_0.1_eviction": rows}
    assert report.plots == [run_dir / "eviction.png"]


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


def test_bad_trace_gammas_and_too_few_tokens_are_one_line_errors(tmp_path):
    """task.trace_gammas=[0] and max_tokens=1 (no verify pass to measure) fail before decoding."""
    from types import SimpleNamespace

    from experiments.tasks._decode import decode
    from specdec.core.errors import SpecdecError

    register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["task.trace_gammas=[0,2]"])
        with pytest.raises(SpecdecError, match=r"task.trace_gammas=\[0, 2\]: every γ must be >= 1"):
            to_config(cfg)
    with pytest.raises(SpecdecError, match="needs max_tokens >= 2"):
        decode(SimpleNamespace(max_tokens=1), None, tmp_path)
