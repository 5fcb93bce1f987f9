"""Hydra callback: when a sweep ends, build its report and say where everything is.

Registered in conf/config.yaml under `hydra.callbacks.report`; runs in the launching process
after every job finished (any launcher), so the report sees the whole sweep. Same as running
`specdec report SWEEP_DIR --wandb MODE` by hand.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepReport(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from specdec.report import build_report

        report = build_report(Path(config.hydra.sweep.dir), wandb_mode=config.logger.mode)
        print(report.describe(), flush=True)
