"""What the probe tasks share: one job runs one of the question's probes (`specdec.probes`).

    specdec-exp experiment=eviction model=tiny       # = specdec probe eviction --model tiny

`task.options` holds the probe's own knobs (`specdec.cli.probe.ProbeOptions` fields: budgets,
prompts, profile_prompts, limit, positions, policy, read_json); the probe writes NAME.md, .json
and .png into the run directory, and its rows become the job's table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._decode import model_dir


def run_probe_task(
    name: str, cfg, run_dir: Path, headline_name: str, headline: Callable[[list[dict]], float]
) -> TaskResult:
    from specdec.cli.probe import ProbeOptions, run_probe

    opts = ProbeOptions(
        model=model_dir(cfg.model.path, cfg.model.bits),
        out=str(run_dir),
        max_tokens=cfg.max_tokens,
        **cfg.task.options,
    )
    rows = run_probe(name, opts)
    plots = [p for p in [run_dir / f"{name}.png"] if p.exists()]
    return TaskResult(headline_name, headline(rows), {"rows": len(rows)}, {name: rows}, plots)
