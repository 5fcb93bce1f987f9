"""The experiment registry: `experiments/tasks/<name>.py` exposes `run(cfg, run_dir) -> TaskResult`.

`task.name` in the composed config picks the module; adding an experiment is one small file here
plus its `conf/experiment/<name>.yaml`. A name that is no module here but a probe of
specdec/probes/ (its registry) runs that probe (_probe.py): adding a probe adds its task. A task writes its raw measurements (records JSONL and the
like) into `run_dir` itself; the entry point writes the rest (summary, tables, completion marker)
and logs the TaskResult to wandb.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from specdec.core.errors import SpecdecError


@dataclass
class TaskResult:
    headline_name: str  # the metric a sweeper optimises, e.g. "mean_union"
    headline: float | None
    summary: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)  # name -> rows
    plots: list[Path] = field(default_factory=list)
    model_info: dict = field(default_factory=dict)  # top_k, n_experts, ... of the loaded model


class Task(Protocol):
    def __call__(self, cfg, run_dir: Path) -> TaskResult: ...


def task_names() -> list[str]:
    from specdec.probes import probe_names

    modules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted({*modules, *probe_names()})


def get_task(name: str) -> Task:
    try:
        module = importlib.import_module(f"experiments.tasks.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"experiments.tasks.{name}":
            raise
        from specdec.probes import PROBES

        if name in PROBES:
            from experiments.tasks._probe import probe_task

            return probe_task(name)
        raise SpecdecError(
            f"unknown task {name!r}: use one of {', '.join(task_names())} "
            f"(or add experiments/tasks/{name}.py exposing run(cfg, run_dir))"
        ) from None
    return module.run
