"""docs/results/eviction.md: hit rate of each policy and bound at each budget share.

specdec probe all --model tiny --out runs/probes
python -m analysis.eviction runs/probes      # or a specdec-exp experiment=eviction sweep
"""

from __future__ import annotations

import sys

from analysis._runs import md_table, probe_table_main


def table(rows: list[dict]) -> str:
    slots = sorted({r["budget_slots"] for r in rows})
    share = {r["budget_slots"]: r["budget_share"] for r in rows}
    cell = {(r["policy"], r["budget_slots"]): r for r in rows}
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    label = {r["policy"]: r.get("label", r["policy"]) for r in rows}
    body = [
        [label[p]]
        + [f"{100 * cell[p, n]['hit_rate']:.1f}%" if (p, n) in cell else "" for n in slots]
        for p in policies
    ]
    return md_table(["policy"] + [f"{share[n]:.0%}" for n in slots], body)


def main(argv: list[str] | None = None) -> int:
    return probe_table_main(__doc__, "eviction", table, argv)


if __name__ == "__main__":
    sys.exit(main())
