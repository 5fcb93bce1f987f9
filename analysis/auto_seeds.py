"""docs/results/gamma-auto.md: `--gamma auto` against γ = 4 and plain in replay, over the oracle's
seeds, at a CUDA session's setting (benchmarks/bench_gamma_auto.py `seeds`).

    python -m analysis.auto_seeds --results benchmarks/results/gamma_auto_seeds_410slots.json

Per setting (cache slots, oracle α, run length): auto / γ = 4 in modeled tokens per second, its
median over the seeds and range, the seeds within 1.05x of γ = 4 (auto / γ = 4 >= 1 / 1.05), the
medians of γ = 4 / plain and auto / plain, and the pass auto first drafted at (median over the
seeds that drafted; "never") with its re-syncs to plain's cache, all seeds ("—": a file written
before the bench recorded them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis._runs import md_table


def table(paths: list[Path]) -> str:
    rows = []
    for path in paths:
        for r in json.loads(path.read_text())["rows"]:
            rows.append([
                r["slots"], r["alpha"], r["tokens"],
                f"{r['auto_over_4_median']:.3f} ({r['min']:.3f}-{r['max']:.3f})",
                f"{r['within_1.05']} of {r['seeds']}",
                f"{r['4_over_plain_median']:.3f}", f"{r['auto_over_plain_median']:.3f}",
                _first(r), r.get("resyncs", "—"),
            ])  # fmt: skip
    head = ["slots", "α", "tokens", "auto / γ = 4 (range)", "within 1.05x of γ = 4",
            "γ = 4 / plain", "auto / plain", "first draft, pass", "re-syncs"]  # fmt: skip
    return md_table(head, rows)


def _first(row: dict) -> str:
    if "first_draft_median" not in row:
        return "—"
    first = row["first_draft_median"]
    return "never" if first is None else f"{first:g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, nargs="+", required=True, help="seeds result files")
    print(table(p.parse_args(argv).results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
