"""docs/results/gamma-auto.md: how early `--gamma auto`'s guard can afford its first draft, against
the held-out runs where a fixed γ won.

    python -m analysis.auto_first_draft

For each held-out setting (benchmarks/results/auto_heldout_*.json, seed 2024) where a fixed γ
beat plain in bytes and in time: the first committed token at which the guard's worst-case
check (specdec/gamma/chooser.py `slack`) admits a γ = 2 pass in bytes, if the run decoded plainly
until then. The run's spent then equals plain's totals, N tokens of plain's measured bytes per
token, so the check (1 + BOUND)·(N + 1)·plain >= N·plain + worst + reserve asks
N >= (worst + reserve - (1 + BOUND)·plain) / (BOUND·plain). `worst`: the pass with every expert
of its two positions missing (and, MTP, its draft's k), as the guard prices a pass none of whose
experts is resident (near exact at budgets where plain misses nearly every expert); `reserve`:
the cache's size in reads (today), or at most the pass's own reads (were the run re-synced to
plain's shadow cache, designed and not built). Sizes from the bundled model's pack and the
budget's slot plan, as the bench loaded it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from analysis._runs import md_table
from analysis.gamma_auto import RESULTS
from specdec.gamma.chooser import BOUND
from specdec.store.budget import Budget, plan_slots
from specdec.stream.loader import load


def rows() -> list[list]:
    sm = load("tiny", budget="100%", io="buffered", with_mtp=True, warm=False)
    try:
        index, main = sm.streamer.index, sm.main_moe_layers
        top_k = sm.model.args.num_experts_per_tok
    finally:
        sm.close()
    block = index.layers[main[0]].bytes_of([0])
    body = []
    for mode in ("replay", "runtime"):
        data = json.loads((RESULTS / f"auto_heldout_{mode}.json").read_text())
        for r in data["rows"]:
            if not r["fixed_wins"]:
                continue
            mtp = r["drafter"] == "mtp"
            layers = list(index.layers) if mtp else main
            slots = plan_slots(Budget.parse(f"{r['budget']}%"), index, top_k, layers=layers).n_slots
            plain = r["runs"]["1"]["bytes"]  # bytes per committed token
            reads = 2 * top_k * len(main) + (top_k if mtp else 0)
            first = [
                max(0, math.ceil((reads * block + reserve * block - (1 + BOUND) * plain)
                                 / (BOUND * plain)))
                for reserve in (slots, min(slots, reads))
            ]  # fmt: skip
            body.append([
                mode, r["i"], r["tokens"], f"{r['budget']}%", r["drafter"], slots,
                f"{plain / 1e3:.0f}", f"{reads * block / 1e3:.0f}", first[0], first[1],
                f"{r['auto_vs_best_fixed']:.2f}x",
            ])  # fmt: skip
    return body


def table() -> str:
    heads = ["mode", "setting", "tokens", "budget", "drafter", "cache slots",
             "plain kB/token", "γ = 2 pass at its worst, kB", "first draft: reserve = cache",
             "reserve = the pass's reads", "auto / best fixed γ, measured"]  # fmt: skip
    return md_table(heads, rows())


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(table(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
