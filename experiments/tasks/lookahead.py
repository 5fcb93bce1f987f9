"""lookahead: how much of layer L's top-k the router sees d layers early (question §2).

Runs `specdec probe lookahead` (specdec.probes.lookahead) into the run directory. Headline: the
decode-position recall of layer L's router evaluated on the MoE input two layers earlier, the
question's L+2 row (72.5% on MiniMax-M2.5).

    specdec-exp experiment=lookahead model=tiny
"""

from __future__ import annotations

from pathlib import Path

from experiments.tasks import TaskResult
from experiments.tasks._probe import run_probe_task


def _recall_two_ahead(rows: list[dict]) -> float | None:
    hit = [r for r in rows if r["kind"] == "recall" and r["d"] == 2]
    return hit[0]["recall_decode"] if hit else None


def run(cfg, run_dir: Path) -> TaskResult:
    return run_probe_task("lookahead", cfg, run_dir, "recall_decode_2_ahead", _recall_two_ahead)
