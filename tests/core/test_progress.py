"""Progress bars (specdec.core.progress): on stderr at a terminal, off without one or when quiet.

pytest tests/core/test_progress.py -q
"""

from __future__ import annotations

import io
import os
import sys

from specdec.cli import main
from specdec.core.progress import QUIET_ENV
from specdec.core.units import Budget
from specdec.sim.simulate import simulate
from specdec.trace.format import save_trace
from specdec.trace.synthetic import synthetic_trace


class Terminal(io.StringIO):
    """stderr that says it is a terminal (what tqdm draws on)."""

    def isatty(self) -> bool:
        return True


def test_simulate_draws_a_bar_at_a_terminal_only(monkeypatch):
    monkeypatch.delenv(QUIET_ENV, raising=False)
    trace = synthetic_trace(60, n_layers=4, n_experts=32, top_k=4, seed=1)
    for stderr, quiet, drawn in ((Terminal(), "", True), (io.StringIO(), "", False),
                                 (Terminal(), "1", False)):  # fmt: skip
        monkeypatch.setattr(sys, "stderr", stderr)
        monkeypatch.setenv(QUIET_ENV, quiet)
        simulate(trace, ["lru"], [Budget.parse("25%")])
        assert ("simulate" in stderr.getvalue()) is drawn, (quiet, stderr.getvalue())


def test_quiet_flag_quiets_the_command_and_what_it_starts(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(QUIET_ENV, raising=False)
    save_trace(synthetic_trace(60, n_layers=4, n_experts=32, top_k=4, seed=1), tmp_path / "t")
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["simulate", str(tmp_path / "t"), "--budget", "25%", "--quiet"]) == 0
    assert "simulate" not in sys.stderr.getvalue()
    assert os.environ[QUIET_ENV] == "1"  # inherited by the processes it starts
    capsys.readouterr()
