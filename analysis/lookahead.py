"""README "Router lookahead": recall of layer L's top-k by its router on earlier MoE inputs.

    specdec probe lookahead --model tiny --out runs/probes
    python -m analysis.lookahead runs/probes     # or a specdec-exp experiment=lookahead sweep

Recall over decode positions (the prefetch that matters while generating). The README's runtime
table comes from `specdec generate --lookahead d --json` runs, one per row (the command is there).
"""

from __future__ import annotations

import argparse
import sys

from analysis._runs import fail, md_table, probe_rows
from specdec.errors import SpecdecError


def _where(d: int | None) -> str:
    if d is None:
        return "same layer, next token"
    return "L+1 (one MoE layer earlier)" if d == 1 else f"L+{d}"


def table(rows: list[dict]) -> str:
    recall = [r for r in rows if r.get("kind", "recall") == "recall"]
    body = [[_where(r["d"]), f"{100 * r['recall_decode']:.1f}%"] for r in recall]
    return md_table(["router evaluated at", "recall"], body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="probe output directory or specdec-exp run directory")
    args = p.parse_args(argv)
    try:
        print(table(probe_rows(args.run_dir, "lookahead")), end="")
    except SpecdecError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
