"""Every probe of specdec/probes/ is a task: `task.name=NAME` runs `specdec probe NAME`.

    specdec-exp experiment=eviction model=tiny       # = specdec probe eviction --model tiny
    specdec-exp task.name=gates model=tiny           # any registered probe, with or without a yaml

get_task (experiments/tasks/__init__.py) falls back to the probe registry for a name that is no
module here. The job's model is the `model` group's, `max_tokens` the config's; a probe that
reads budgets takes `[cache.budget]` and one that reads a policy `cache.policy`, unless
`task.options` gives them (`budgets` as Budget strings: [5%, 10%], 512MiB, 96slots).
`task.options` holds the probe's other knobs (ProbeOptions fields: prompts, profile_prompts,
limit, positions, read_json, ... and its own Options' fields); the probe writes NAME.md, .json and
.png into the run directory, and its rows become the job's table, its headline the job's.
"""

from __future__ import annotations

from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._decode import model_dir


def run_probe_task(name: str, cfg, run_dir: Path) -> TaskResult:
    from specdec.probes import get_probe, make_options, parse_budgets, run_probe

    probe = get_probe(name)
    options = {k: v for k, v in cfg.task.options.items() if v is not None}
    if "budgets" in probe.options and "budgets" not in options:
        options["budgets"] = [cfg.cache.budget]
    if "policy" in probe.options and "policy" not in options:
        options["policy"] = cfg.cache.policy
    if "budgets" in options:
        given = options["budgets"]
        given = list(given) if isinstance(given, list | tuple) else [given]
        options["budgets"] = parse_budgets(
            given, f"task.options.budgets={given}".replace("'", ""), fractions=True
        )
    fields = {
        "model": model_dir(cfg.model.path, cfg.model.bits),
        "out": str(run_dir),
        "max_tokens": cfg.max_tokens,
        **options,
    }
    out = run_probe(name, make_options(name, fields, where="task.options"))
    plots = [p for p in [out.files.get("png")] if p is not None and Path(p).exists()]
    headline = probe.headline(out.rows)
    return TaskResult(
        probe.headline_name or name, headline, {"rows": len(out.rows)}, {name: out.rows}, plots
    )


def probe_task(name: str):
    """The task `run(cfg, run_dir)` of probe `name`."""

    def run(cfg, run_dir: Path) -> TaskResult:
        return run_probe_task(name, cfg, run_dir)

    return run
