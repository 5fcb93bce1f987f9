"""The sweep report and its wandb sink, on run directories written here (no sweep runs).

    pytest tests/report/test_report.py

The report of a real sweep (tables, plots, speedups from the records): tests/e2e/test_experiments.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_wandb_online_without_credentials_is_one_clear_error(tmp_path, monkeypatch):
    from specdec.core.errors import SpecdecError
    from specdec.report.wandb_sink import WandbSink

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login
    with pytest.raises(SpecdecError, match="wandb login"):
        WandbSink("online", tmp_path, name="x")
    with pytest.raises(SpecdecError, match="offline, online, disabled"):
        WandbSink("cloud", tmp_path, name="x")


def probe_job(run_dir: Path) -> list[dict]:
    """A finished job of a task without records (a probe) in `run_dir`; returns its rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.tasks import TaskResult
    from specdec.report import rundir

    run_dir.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([0.1, 0.2], [0.5, 0.6])
    fig.savefig(run_dir / "eviction.png")
    plt.close(fig)
    rows = [{"policy": "lru", "budget_share": 0.1, "hit_rate": 0.53}]
    result = TaskResult(
        "hit_rate", 0.53, {"rows": 1}, {"eviction": rows}, [run_dir / "eviction.png"]
    )
    card = rundir.JobCard("eviction", "none", 1, "m4-24gb", {"model": "tiny"}, "tiny")
    meta = {"config_hash": "abc", "sweep": "probe", "versions": {}}
    rundir.write_card(run_dir, {"opaque": "harness config"}, meta, card)
    rundir.write_outputs(run_dir, result)
    rundir.mark_done(run_dir, "abc", result, 1.0)
    return rows


def test_report_shows_tasks_without_records(tmp_path):
    """A task that does not decode (a probe) is reported by its own tables and figures."""
    from specdec.report import build_report

    run_dir = tmp_path / "sweep" / "task.options.budgets=[0.1]"
    rows = probe_job(run_dir)
    report = build_report(tmp_path / "sweep", wandb_mode="disabled")
    md = report.markdown.read_text()
    assert "## Other tasks" in md and "| lru | 0.1 | 0.53 |" in md
    assert "![eviction](../task.options.budgets=[0.1]/eviction.png)" in md
    assert report.tables == {"task.options.budgets_0.1_eviction": rows}
    assert report.plots == [run_dir / "eviction.png"]


def test_a_runs_whole_summary_goes_to_wandb():
    """Nested dicts, histograms and flags of a decode summary reach wandb's run summary, not
    only its top-level numbers."""
    from specdec.report.wandb_sink import summary_items

    summary = {
        "mean_union": 3.5,
        "drafter": "mtp",
        "hit_rate": None,
        "holds_all_experts": False,
        "accepted_length_hist": [4, 2, 9],
        "per_token_ms": {"compute": 1.5, "blocked_on_reads": 0.25},
        "cache_counters": {"hits": 7, "by_phase": {"verify": 5}},
        "tokens_per_s": float("nan"),
    }
    assert dict(summary_items(summary)) == {
        "mean_union": 3.5,
        "drafter": "mtp",
        "holds_all_experts": False,
        "accepted_length_hist": [4, 2, 9],
        "per_token_ms/compute": 1.5,
        "per_token_ms/blocked_on_reads": 0.25,
        "cache_counters/hits": 7,
        "cache_counters/by_phase/verify": 5,
    }


def test_tables_read_without_the_code():
    """Plain-English headers with a definition under the table, thousands separated, no
    exponents; unknown columns keep their names."""
    from specdec.report.markdown import table

    text = table(
        [
            {
                "gamma": 2,
                "bytes_per_token": 909090.9,
                "passes": 12345,
                "acceptance": 0.6512,
                "modeled_tokens_per_s/m4-24gb": 31.25,
                "speedup_vs_plain": 0.8,
                "other": 0.00001234,
            }
        ]
    )
    head, _, row, *notes = text.splitlines()
    assert head == (
        "| γ | bytes per token | passes | acceptance α | tok/s modeled (m4-24gb) "
        "| speed-up vs γ=1 (bytes) | other |"
    )
    assert row == "| 2 | 909,091 | 12,345 | 0.6512 | 31.25 | 0.8 | 1.23e-05 |"
    assert "e+" not in text
    defined = [n.split("**")[1] for n in notes if n.startswith("- **")]
    assert defined == ["γ", "bytes per token", "passes", "acceptance α",
                       "tok/s modeled (m4-24gb)", "speed-up vs γ=1 (bytes)"]  # fmt: skip


def test_wandb_gets_a_scatter_per_gamma_and_bytes_lines(tmp_path):
    """Speed-up vs acceptance as native wandb scatters (one per γ), bytes per token vs γ as
    lines from plain decoding's point; logged by a real offline run."""
    from specdec.report import bytes_lines, speedup_points
    from specdec.report.wandb_sink import WandbSink

    rows = [
        {"drafter": "oracle:0.9", "gamma": 2, "acceptance": 0.9, "speedup_bytes": 1.2},
        {"drafter": "oracle:0.5", "gamma": 2, "acceptance": 0.5, "speedup_bytes": 0.8},
        {"drafter": "oracle:0.9", "gamma": 4, "acceptance": 0.88, "speedup_bytes": 1.1},
        {"drafter": "self", "gamma": 4, "acceptance": None, "speedup_bytes": None},
    ]
    points = speedup_points(rows)
    assert sorted(points) == [2, 4] and len(points[2]) == 2 and len(points[4]) == 1
    jobs = [
        {"drafter": "none", "gamma": 1, "bytes_per_token": 100.0},
        {"drafter": "mtp", "gamma": 2, "bytes_per_token": 150.0},
        {"drafter": "mtp", "gamma": 4, "bytes_per_token": 230.0},
    ]
    assert bytes_lines(jobs) == {"mtp": {1: 100.0, 2: 150.0, 4: 230.0}}
    sink = WandbSink("offline", tmp_path, name="t")
    try:
        sink.log_scatter(
            "speedup_vs_acceptance_g2", points[2], "acceptance", "speed-up vs γ=1", "t"
        )
    finally:
        sink.finish()
    logged = [p.name for p in tmp_path.rglob("*.table.json")]
    assert any(name.startswith("speedup_vs_acceptance_g2") for name in logged), logged


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_report_out_never_touches_what_it_did_not_write(tmp_path):
    """`--out DIR` once deleted DIR/wandb/keep.txt and overwrote DIR/report.md, and `--out RUN`
    the job's own wandb run; both are refused, and the report's own folder is reused."""
    from specdec.core.errors import SpecdecError
    from specdec.report import build_report

    job = tmp_path / "sweep" / "job"
    probe_job(job)
    (job / "wandb").mkdir()
    (job / "wandb" / "offline-run.txt").write_text("not synced yet")
    user = tmp_path / "DIR"
    (user / "wandb").mkdir(parents=True)
    (user / "wandb" / "keep.txt").write_text("mine")
    (user / "report.md").write_text("my report")
    before = {d: tree(d) for d in (user, job)}
    for out in (user, job):
        with pytest.raises(SpecdecError, match="did not write"):
            build_report(tmp_path / "sweep", out, wandb_mode="disabled")
    assert {d: tree(d) for d in (user, job)} == before
    first = build_report(tmp_path / "sweep", wandb_mode="disabled")
    again = build_report(tmp_path / "sweep", wandb_mode="disabled")  # its own folder
    assert first.markdown == again.markdown and again.markdown.exists()


def test_an_online_report_without_credentials_leaves_the_last_report(tmp_path, monkeypatch):
    """`specdec report DIR --wandb online` without a login once rewrote report.md and deleted
    the last report's wandb run (never synced) before it found it could not log: now it
    checks first and leaves the folder as it was."""
    from specdec.core.errors import SpecdecError
    from specdec.report import build_report

    probe_job(tmp_path / "sweep" / "job")
    first = build_report(tmp_path / "sweep", wandb_mode="disabled")
    run = first.markdown.parent / "wandb" / "offline-run-1" / "run.wandb"
    run.parent.mkdir(parents=True)
    run.write_text("not synced yet")
    before = tree(tmp_path / "sweep")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login
    with pytest.raises(SpecdecError, match="wandb login"):
        build_report(tmp_path / "sweep", wandb_mode="online")
    assert tree(tmp_path / "sweep") == before
    # an acceptance out of range: refused before --out is claimed (it was left marked, empty)
    with pytest.raises(SpecdecError, match=r"α must be in \[0, 1\], got 1.5"):
        build_report(tmp_path / "sweep", tmp_path / "o5", wandb_mode="disabled", alphas=[1.5])
    assert not (tmp_path / "o5").exists()


def test_a_job_whose_gamma_is_no_gamma_is_one_line(tmp_path):
    """config.json's job.gamma edited to "x" reached the report's sorting as a TypeError."""
    import json

    from specdec.core.errors import SpecdecError
    from specdec.report import build_report

    job = tmp_path / "sweep" / "job"
    probe_job(job)
    cfg = json.loads((job / "config.json").read_text())
    cfg["job"]["gamma"] = "x"
    (job / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpecdecError, match=r"job/config.json: job.gamma: .*rerun the job"):
        build_report(tmp_path / "sweep", wandb_mode="disabled")


def test_concurrent_reports_of_one_directory(tmp_path):
    """Three `specdec report` at once on one directory once shared one `*.png.tmp` name; now
    each temporary name is the writer's own and the reports take turns on the folder."""
    from concurrent.futures import ThreadPoolExecutor

    from specdec.report import build_report

    probe_job(tmp_path / "sweep" / "job")
    with ThreadPoolExecutor(3) as pool:
        reports = list(
            pool.map(lambda _: build_report(tmp_path / "sweep", wandb_mode="disabled"), range(3))
        )
    assert all(r.markdown.read_text() == reports[0].markdown.read_text() for r in reports)
    assert not [p for p in (tmp_path / "sweep").rglob("*") if ".tmp" in p.name]


def test_verify_figure_labels_a_job_that_drafted_nothing(tmp_path):
    """drafter=none at γ=2 drafts nothing, so its acceptance is None: the figure writes α=-
    (a sweep's report crashed here formatting None). The setting is plain data (SimpleNamespace
    with the fields the figure reads), not a mock of a computation."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    from specdec.report.figures import plot_verify_vs_trace

    def union(mean):
        return SimpleNamespace(mean=mean, per_layer={"1": mean - 0.5, "2": mean + 0.5})

    rows = [
        {"drafter": "none", "gamma": 2, "acceptance": None, "verify_union": 6.5},
        {"drafter": "mtp", "gamma": 2, "acceptance": 0.5, "verify_union": 6.0},
    ]
    st = SimpleNamespace(
        trace={1: union(4.0), 2: union(6.0)}, trace_rows=rows, k=4, n_experts=16, label="tiny"
    )
    path = plot_verify_vs_trace(st, tmp_path / "verify.png")
    assert path.stat().st_size > 1000
