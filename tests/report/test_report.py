"""The sweep report and its wandb sink, on run directories written here (no sweep runs).

    pytest tests/report/test_report.py

The report of a real sweep (tables, plots, speedups from the records): tests/e2e/test_experiments.py.
"""

from __future__ import annotations

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
