"""README "Eviction key": hit rate of each policy and bound at each budget share.

specdec probe all --model tiny --out runs/probes
python -m analysis.eviction runs/probes      # or a specdec-exp experiment=eviction sweep
"""

from __future__ import annotations

import argparse
import sys

from analysis._runs import fail, md_table, probe_rows
from specdec.errors import SpecdecError


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="probe output directory or specdec-exp run directory")
    args = p.parse_args(argv)
    try:
        print(table(probe_rows(args.run_dir, "eviction")), end="")
    except SpecdecError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
