"""docs/results/union-cost.md: cost, ceiling and break-even acceptance per γ.

    python -m analysis.union_cost                                   # the question's own table
    python -m analysis.union_cost --union 1:8,2:13.42,3:17.99,8:35.01 --k 8

The same numbers as `specdec union-model --union ... --k 8` (docs/union-model.md has all of its
output); this prints only the table of docs/results/union-cost.md. A union table measured by a
union_cost sweep is in that sweep's report (`specdec report SWEEP`).
"""

from __future__ import annotations

import argparse
import sys
from decimal import ROUND_HALF_UP, Decimal

from analysis._runs import fail, md_table
from specdec.cli.union_model import parse_union
from specdec.core.errors import SpecdecError
from specdec.costmodel.model import build_union_model

QUESTION = "1:8,2:13.42,3:17.99,8:35.01"  # docs/question.md, top-8 of 256 experts


def _round(x: float, places: int) -> str:
    """As the results show them: the 4 decimals union-model prints, half up (1.6775 -> 1.678)."""
    return str(Decimal(f"{x:.4f}").quantize(Decimal(10) ** -places, ROUND_HALF_UP))


def table(union: dict[int, float], k: float) -> str:
    m = build_union_model(union, [0.8, 0.9, 1.0], k=k)
    body = [
        [r.gamma, f"{r.union:.2f}", _round(r.cost, 3), f"{r.ceiling:.2f}x", _round(r.break_even, 3)]
        for r in m.gammas
        if r.gamma > 1
    ]
    return md_table(["γ", "union", "cost", "ceiling", "break-even α"], body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--union", default=QUESTION, help=f"mean union per γ (default {QUESTION})")
    p.add_argument("--k", type=float, default=8, help="experts per token")
    args = p.parse_args(argv)
    try:
        print(table(parse_union(args.union), args.k), end="")
    except SpecdecError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
