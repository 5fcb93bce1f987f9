"""docs/results/real-scale.md, decode at scale: one row per run of benchmarks/bench_scale.py.

    python benchmarks/bench_scale.py --root ~/big --steps small,big      # writes results/scale.json
    python -m analysis.scale                                         # docs/results/real-scale.md
    python -m analysis.scale benchmarks/results/scale.json

Columns: the run's budget, drafter and γ, the arena's slots ("(all)" when the budget holds every
routed expert), peak RSS against its bound (arena + resident weights + 1 GiB), hit rate, MB read
per committed token, seconds per token of compute / blocked on reads / reads overlapped with
compute, the misses' effective GB/s, and which reference the greedy tokens equal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis._runs import fail, md_table
from specdec.core.errors import SpecdecError

RESULT = "benchmarks/results/scale.json"
SMALL_LAYERS = 2  # bench_scale.py's small model: two MiniMax layers, compared against mlx-lm
HEADERS = [
    "model", "budget", "drafter", "γ", "slots", "peak RSS / bound, GiB", "hit rate",
    "MB read / token", "compute / blocked / overlapped, s per token", "miss GB/s", "tokens",
]  # fmt: skip


def _drafter(run: dict) -> str:
    name = run["drafter"]
    if name.startswith("draft:"):  # the bench's draft model is a tiny random minimax
        name = "draft (tiny minimax)"
    if run.get("lookahead"):
        name += f", lookahead {run['lookahead']}"
    return name


def _tokens(run: dict) -> str:
    for key, label in (("equals_mlx_lm", "= mlx-lm"), ("equals_9gb_plain", "= 9GB plain")):
        if key in run:
            return label if run[key] else f"differ from {label[2:]}"
    return "not compared"


def _row(layers: int, run: dict) -> list[str]:
    t = run["per_token_ms"]
    slots = f"{run['cache_slots']} (all)" if run["holds_all_experts"] else str(run["cache_slots"])
    gbps = run["miss_gb_per_s"]
    return [
        f"{layers} layers",
        run["budget"],
        _drafter(run),
        str(run["gamma"]),
        slots,
        f"{run['peak_rss_gib']:.2f} / {run['rss_limit_gib']:.2f}",
        f"{run['hit_rate']:.2f}",
        f"{run['bytes_per_token_mb']:.0f}",
        " / ".join(
            f"{t[k] / 1e3:.{p}f}"
            for k, p in (("compute", 1), ("blocked_on_reads", 3), ("reads_overlapped", 3))
        ),
        "—" if gbps is None else f"{gbps:.2f}",
        _tokens(run),
    ]


def table(result: dict) -> str:
    rows = [_row(SMALL_LAYERS, r) for r in result.get("small", {}).get("runs", [])]
    big = result.get("big", {})
    rows += [_row(big["layers"], r) for r in big.get("runs", [])]
    if not rows:
        raise SpecdecError("the result holds no decode runs: run bench_scale.py --steps small,big")
    return md_table(HEADERS, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", nargs="?", default=RESULT, help=f"bench_scale output ({RESULT})")
    args = p.parse_args(argv)
    try:
        path = Path(args.result)
        if not path.exists():
            raise SpecdecError(f"{path} not found: run benchmarks/bench_scale.py first")
        print(table(json.loads(path.read_text())), end="")
    except SpecdecError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
