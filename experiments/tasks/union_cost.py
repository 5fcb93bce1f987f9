"""union_cost: the experts one verify pass reads, against the union along the committed trace.

One job decodes with the configured drafter and γ and records the union of every real verify
batch (rejected drafts included). The plain jobs (γ = 1) also measure, along their own committed
trace, the union for every γ of `task.trace_gammas` and the overlap between consecutive tokens
(`specdec.decode.trace_union`): the quantities the seed question tabulated. They are properties
of the trace, the same for every drafter, so the γ > 1 jobs do not repeat them. `specdec report`
fits both unions and puts them side by side.

    specdec-exp -m experiment=union_cost gamma=1,2,4,8 drafter=mtp,self
"""

from __future__ import annotations

from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._decode import decode, loaded_model, model_info, per_layer_union
from specdec.decode.trace_union import consecutive_overlap, trace_union
from specdec.report.rundir import write_trace_union


def run(cfg, run_dir: Path) -> TaskResult:
    with loaded_model(cfg) as sm:
        res = decode(cfg, sm, run_dir)
        tables = {
            "union_per_layer": [
                {"layer": int(lid), "mean_union": u}
                for lid, u in per_layer_union(res.records).items()
            ]
        }
        summary = dict(res.summary)
        if cfg.gamma.fixed == 1 and cfg.task.trace_gammas:
            prompt = sm.encode(cfg.prompt)
            sm.reset_cache()
            trace = trace_union(sm, prompt, cfg.max_tokens, list(cfg.task.trace_gammas))
            rho = consecutive_overlap(sm, prompt, cfg.max_tokens)
            write_trace_union(run_dir, rho, trace)
            summary["consecutive_overlap"] = rho
            tables["trace_union"] = [
                {"gamma": int(g), "mean_union": t["mean"], "windows": t["windows"]}
                for g, t in sorted(trace.items())
            ]
        info = model_info(sm)
    return TaskResult("mean_union", summary["mean_union"], summary, tables, [], info)
