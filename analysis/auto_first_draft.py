"""docs/results/gamma-auto.md: how early `--gamma auto`'s guard can afford its first draft, against
the held-out runs where a fixed γ won.

    python -m analysis.auto_first_draft
    python -m analysis.auto_first_draft --results benchmarks/results/auto_heldout_seed2025.json

For each held-out setting (default: benchmarks/results/auto_heldout_{replay,runtime}.json, seed
2024; --results: other result files of bench_auto_heldout.py) where a fixed γ
beat plain in bytes and in time: the first committed token at which the guard's worst-case
check (specdec/gamma/chooser.py `slack`) admits a γ = 2 pass in bytes, if the run decoded plainly
until then. The run's spent then equals plain's totals, N tokens of plain's measured bytes per
token, and the pass's certain token is credited no bytes (plain may read nothing for it), so
the check (1 + BOUND)·N·plain >= N·plain + worst + reserve asks N >= (worst + reserve) /
(BOUND·plain); where the reserve is none (every access misses) the token is credited at plain's
cost, the guard owes its bound only from min(FRONT, the run's length) h on, and admits the pass
from the start where plain + BOUND·h·plain covers it (`first_draft`). `worst`: the pass with every expert
of its two positions missing (and, MTP, its draft's k), as the guard prices a pass none of whose
experts is resident (near exact at budgets where plain misses nearly every expert); `reserve`:
before re-sync the cache's size in reads (`lru_reserve`; none where the cache holds at most
(L − 1)·k experts), with it what re-syncing to plain's shadow would read after the pass from a
cache that is plain's, the pass's own reads, at most the cache's size (GammaChooser._reserve).
Sizes from the bundled model's pack and the budget's slot plan, as the bench loaded it.
"least": the smallest auto / best fixed γ in time a run that decodes plainly until that first
draft (with re-sync) can reach (plain's measured seconds per token until then, the best fixed
γ's after), against the measured ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from analysis._runs import md_table
from analysis.gamma_auto import RESULTS
from specdec.cache.spec import PolicySpec
from specdec.gamma.chooser import BOUND, front_for, lru_reserve
from specdec.store.budget import Budget, plan_slots
from specdec.stream.loader import load

DEFAULT = tuple(RESULTS / f"auto_heldout_{mode}.json" for mode in ("replay", "runtime"))


def rows(results: tuple[Path, ...] = DEFAULT) -> list[list]:
    sm = load("tiny", budget="100%", io="buffered", with_mtp=True, warm=False)
    try:
        index, main = sm.streamer.index, sm.main_moe_layers
        top_k = sm.model.args.num_experts_per_tok
    finally:
        sm.close()
    block = index.layers[main[0]].bytes_of([0])
    body = []
    found = [r for path in results for r in json.loads(path.read_text())["rows"]]
    for mode in ("replay", "runtime"):
        for r in (r for r in found if r["mode"] == mode):
            if not r["fixed_wins"]:
                continue
            # MTP's layer reads and holds slots at runtime only: replay has no draft phase and
            # its budget is of the main layers' experts (bench_auto_heldout's `replay`)
            mtp = r["drafter"] == "mtp" and mode == "runtime"
            layers = list(index.layers) if mtp else main
            if mode == "replay":
                routed = sum(index.layers[lid].n_experts for lid in main)
                slots = max(1, round(r["budget"] / 100 * routed))
            else:
                budget = Budget.parse(f"{r['budget']}%")
                slots = plan_slots(budget, index, top_k, layers=layers).n_slots
            plain = r["runs"]["1"]["bytes"]  # bytes per committed token
            reads = 2 * top_k * len(main) + (top_k if mtp else 0)
            guard = lru_reserve(PolicySpec("lru"), slots, len(main), top_k)  # the bench's
            first = [
                first_draft(reads * block, reserve * block, plain, r["tokens"])
                for reserve in (guard, min(guard, reads))
            ]
            body.append([
                mode, r["i"], r["tokens"], f"{r['budget']}%", r["drafter"], slots,
                f"{plain / 1e3:.0f}", f"{reads * block / 1e3:.0f}", first[0], first[1],
                f"{least(r, first[1]):.2f}x", f"{r['auto_vs_best_fixed']:.2f}x",
            ])  # fmt: skip
    return body


def first_draft(worst: float, reserve: float, plain: float, tokens: int) -> int:
    """The first committed token N at which the guard's worst check admits a pass of `worst`
    bytes, the run plain until then (its spent = plain's totals, N·plain):
    (1 + BOUND)·(N·plain + credit) + ahead >= N·plain + worst + reserve. `credit`, the pass's
    certain token: plain's cost only where the reserve is none (every access misses:
    `front_for`), else none; `ahead`, there: BOUND·plain for each token between the pass and
    min(FRONT, tokens), which makes the check p + BOUND·h·p >= worst at any N < h."""
    front = front_for(reserve)
    if BOUND * min(front, tokens) * plain >= worst - plain:
        return 0
    credit = plain if front else 0.0
    return max(0, math.ceil((worst + reserve - (1 + BOUND) * credit) / (BOUND * plain)))


def least(r: dict, first: int) -> float:
    """The least auto / best fixed γ in time that a run plain for its first `first` tokens can
    reach: plain's seconds per token until then, the best fixed γ's after (as if auto matched it
    from its first draft on)."""
    runs = r["runs"]
    best = min(runs[g]["s"] for g in r["fixed_wins"])  # seconds per committed token
    n, plain_n = r["tokens"], min(first, r["tokens"])
    return (plain_n * runs["1"]["s"] + (n - plain_n) * best) / (n * best)


def table(results: tuple[Path, ...] = DEFAULT) -> str:
    heads = ["mode", "setting", "tokens", "budget", "drafter", "cache slots",
             "plain kB/token", "γ = 2 pass at its worst, kB",
             "first draft: the cache's size in reserve", "with re-sync",
             "auto / best fixed γ: least", "measured"]  # fmt: skip
    return md_table(heads, rows(results))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, nargs="+", default=list(DEFAULT))
    print(table(tuple(ap.parse_args(argv).results)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
