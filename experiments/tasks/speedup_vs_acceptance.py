"""speedup_vs_acceptance: measured tokens per pass, bytes and modeled tokens/s per (α, γ).

Swept with the oracle drafter (acceptance under control) and a plain γ = 1 job as baseline:

    specdec-exp -m experiment=speedup_vs_acceptance drafter.alpha=0.5,0.7,0.9,1.0 gamma=1,2,3,4,8

Each job decodes once; its headline is modeled tokens/s on the configured device profile. The
speedups need the γ = 1 job of the same sweep, so `specdec report` computes them, with the model
curve per γ, break-even acceptances and the best γ per acceptance.
"""

from __future__ import annotations

from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._decode import decode, loaded_model, model_info


def run(cfg, run_dir: Path) -> TaskResult:
    with loaded_model(cfg) as sm:
        res = decode(cfg, sm, run_dir)
        info = model_info(sm)
    s = res.summary
    name = next(k for k in s if k.startswith("modeled_tokens_per_s/"))
    hist = [{"accepted": i, "passes": n} for i, n in enumerate(s["accepted_length_hist"])]
    return TaskResult(name, s[name], s, {"accepted_length_hist": hist}, [], info)
