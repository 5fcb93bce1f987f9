"""docs/results/lookahead.md: recall of layer L's top-k by its router on earlier MoE inputs.

    specdec probe lookahead --model tiny --out runs/probes
    python -m analysis.lookahead runs/probes     # or a specdec-exp experiment=lookahead sweep

Recall over all positions (prompt and decode). The results file's runtime
table comes from `specdec generate --lookahead d --json` runs, one per row (the command is there).
"""

from __future__ import annotations

import sys

from analysis._runs import md_table, probe_table_main


def _where(d: int | None) -> str:
    if d is None:
        return "same layer, next token"
    return "L+1 (one MoE layer earlier)" if d == 1 else f"L+{d}"


def table(rows: list[dict]) -> str:
    recall = [r for r in rows if r.get("kind", "recall") == "recall"]
    body = [[_where(r["d"]), f"{100 * r['recall_all']:.1f}%"] for r in recall]
    return md_table(["router evaluated at", "recall"], body)


def main(argv: list[str] | None = None) -> int:
    return probe_table_main(__doc__, "lookahead", table, argv)


if __name__ == "__main__":
    sys.exit(main())
