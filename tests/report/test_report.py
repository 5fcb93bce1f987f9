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
