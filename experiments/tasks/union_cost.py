"""union_cost: the experts one verify pass reads, against the union along the committed trace.

One job decodes with the configured drafter and γ and records the union of every real verify
batch (rejected drafts included). The plain jobs (γ = 1) also measure the union along their own
committed trace for every γ of `task.trace_gammas` (`specdec.decode.trace_union`), the quantity
the seed question tabulated: it is a property of the trace, the same for every drafter, so the
γ > 1 jobs do not repeat it. `specdec report` fits both and puts them side by side.

    specdec-exp -m experiment=union_cost gamma=1,2,4,8 drafter=mtp,self
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._decode import decode, loaded_model, model_info, per_layer_union, prompt_ids

TRACE = "trace_union.json"
log = logging.getLogger(__name__)


def run(cfg, run_dir: Path) -> TaskResult:
    with loaded_model(cfg) as sm:
        res = decode(cfg, sm, run_dir)
        tables = {
            "union_per_layer": [
                {"layer": int(lid), "mean_union": u}
                for lid, u in per_layer_union(res.records).items()
            ]
        }
        if cfg.gamma == 1 and cfg.task.trace_gammas:
            trace = measure_trace(cfg, sm)
            if trace is not None:
                write_trace(run_dir / TRACE, trace)
                tables["trace_union"] = [
                    {"gamma": int(g), "mean_union": float(t["mean"])}
                    for g, t in sorted(trace.items())
                ]
        info = model_info(sm)
    return TaskResult("mean_union", res.summary["mean_union"], res.summary, tables, [], info)


def measure_trace(cfg, sm) -> dict | None:
    """Union along the plain run's committed trace per γ; None (and a warning) without the
    library function, so the verify-batch measurements still run on older checkouts."""
    try:
        from specdec.decode.trace_union import trace_union
    except ModuleNotFoundError as e:
        if e.name != "specdec.decode.trace_union":
            raise
        log.warning("trace union not measured: specdec.decode.trace_union is not in this checkout")
        return None
    sm.reset_cache()
    return trace_union(sm, prompt_ids(sm, cfg.prompt), cfg.max_tokens, list(cfg.task.trace_gammas))


def write_trace(path: Path, trace: dict) -> None:
    """{γ: {"mean", "per_layer": {layer: union}}} as JSON (keys as strings), atomically."""
    rows = {
        str(g): {
            "mean": float(t["mean"]),
            "per_layer": {str(lid): float(u) for lid, u in t["per_layer"].items()},
        }
        for g, t in trace.items()
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    os.replace(tmp, path)
