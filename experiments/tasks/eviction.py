"""eviction: recency vs hotness vs any static pinning, against the offline bounds (question §1).

Runs `specdec probe eviction` (specdec.probes.eviction) into the run directory. Headline: LRU's
hit rate minus the fractional-knapsack bound of static pinning, averaged over the budgets: above
zero, recency beats every static policy, as the question measured (53.0% against 45.0%).

    specdec-exp experiment=eviction task.options.budgets=[0.05,0.1,0.2]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.tasks import TaskResult
from experiments.tasks._probe import run_probe_task


def _lru_minus_bound(rows: list[dict]) -> float:
    rate = {(r["policy"], r["budget_slots"]): r["hit_rate"] for r in rows}
    budgets = sorted({b for p, b in rate if p == "lru"})
    return float(np.mean([rate["lru", b] - rate["knapsack_bound", b] for b in budgets]))


def run(cfg, run_dir: Path) -> TaskResult:
    return run_probe_task("eviction", cfg, run_dir, "lru_minus_knapsack_bound", _lru_minus_bound)
