"""Hydra callback: when a sweep ends, build its report and say where everything is.

Registered in conf/config.yaml under `hydra.callbacks.report`; runs in the launching process
after every job finished (any launcher), so the report sees the whole sweep. Same as running
`specdec report SWEEP_DIR --wandb MODE` by hand. Hydra turns a callback's exception into a
warning; a report that fails must fail the command, so it exits instead.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from specdec.core.errors import SpecdecError


class SweepReport(Callback):
    """Holds the sweep directory's lock for the whole sweep, then builds its report."""

    def __init__(self) -> None:
        self._lock: int | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from experiments.config import check_sweep_name
        from specdec.core.files import acquire
        from specdec.report.rundir import SWEEP_LOCK

        sweep = Path(config.hydra.sweep.dir)
        try:  # a second identical sweep would interleave the first one's records and report
            check_sweep_name(config.sweep)  # before Hydra makes runs/sweeps/NAME
            self._lock = acquire(sweep / SWEEP_LOCK, wait=False, what=f"sweep directory {sweep}")
        except SpecdecError as e:
            raise SystemExit(f"specdec-exp: error: {e}") from None

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        try:
            self._report(config)
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    def _report(self, config: DictConfig) -> None:
        from specdec.report import build_report

        try:
            report = build_report(Path(config.hydra.sweep.dir), wandb_mode=config.logger.mode)
        except SpecdecError as e:
            raise SystemExit(f"specdec-exp: report: error: {e}") from None
        except Exception:
            traceback.print_exc()
            raise SystemExit("specdec-exp: the sweep finished but its report failed") from None
        print(report.describe(), flush=True)
