"""docs/results/speculation.md: drafter × γ, modeled speed-ups on M4 and M5.

    specdec-exp gamma=1,2,3,4,8 sweep=readme-clock
    specdec-exp gamma=1,2,3,4,8 sweep=readme-clock-m5 device=m5-24gb
    python analysis/speculation.py runs/sweeps/readme-clock --m5 runs/sweeps/readme-clock-m5 \
        --drafters mtp,self,oracle:0.9

Speed-ups are against the mean of the sweep's γ = 1 jobs (every drafter decodes plainly at
γ = 1, so those jobs are one measurement, shown as `none`); "bytes" = bytes read per committed
token at γ = 1 / at γ. Modeled tok/s is the job's own device profile (M4: m4-24gb).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from analysis._runs import decoding_jobs, fail, md_table
from specdec.core.errors import SpecdecError


def _by_key(jobs) -> dict[tuple[str, int], object]:
    return {(j.drafter, j.gamma): j for j in jobs}


def _plain_tps(jobs) -> float:
    return float(np.mean([j.modeled_tps for j in jobs if j.gamma == 1]))


def table(main_dir: str, m5_dir: str | None, order: list[str] | None) -> str:
    jobs = decoding_jobs(main_dir)
    m5 = decoding_jobs(m5_dir) if m5_dir else []
    m5_by, m5_base = _by_key(m5), (_plain_tps(m5) if m5 else None)
    plain = [j for j in jobs if j.gamma == 1]
    base_tps = _plain_tps(jobs)
    base_bpt = float(np.mean([j.summary["bytes_per_token"] for j in plain]))
    drafters = order or sorted({j.drafter for j in jobs if j.gamma > 1})
    rows = [
        [
            "none",
            1,
            "—",
            f"{np.mean([j.summary['mean_union'] for j in plain]):.2f}",
            f"{base_bpt / 1e3:.0f} KB",
            f"{np.mean([j.summary['hit_rate'] for j in plain]):.2f}",
            f"{base_tps:.0f}",
            "1.00x",
            "1.00x" if m5 else "—",
            "1.00x",
        ]
    ]
    spec = sorted(
        (j for j in jobs if j.gamma > 1), key=lambda j: (drafters.index(j.drafter), j.gamma)
    )
    for j in spec:
        s = j.summary
        other = m5_by.get((j.drafter, j.gamma))
        rows.append(
            [
                j.drafter,
                j.gamma,
                f"{s['acceptance']:.2f}",
                f"{s['mean_union']:.2f}",
                f"{s['bytes_per_token'] / 1e3:.0f} KB",
                f"{s['hit_rate']:.2f}",
                f"{j.modeled_tps:.0f}",
                f"{j.modeled_tps / base_tps:.2f}x",
                f"{other.modeled_tps / m5_base:.2f}x" if other else "—",
                f"{base_bpt / s['bytes_per_token']:.2f}x",
            ]
        )
    heads = ["drafter", "γ", "acceptance", "mean union", "bytes/token", "hit rate"]
    heads += ["modeled tok/s (M4)", "speedup, M4", "speedup, M5", "speedup, bytes"]
    return md_table(heads, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", help="the main sweep's directory (M4 profile)")
    p.add_argument("--m5", help="the same sweep run with device=m5-24gb")
    p.add_argument("--drafters", help="row order, e.g. mtp,self,oracle:0.9 (default: sorted)")
    args = p.parse_args(argv)
    order = args.drafters.split(",") if args.drafters else None
    try:
        print(table(args.sweep, args.m5, order), end="")
    except (SpecdecError, ValueError) as e:
        return fail(SpecdecError(str(e)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
