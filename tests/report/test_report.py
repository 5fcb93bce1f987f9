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
