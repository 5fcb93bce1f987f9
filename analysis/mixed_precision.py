"""docs/results/mixed-precision.md: mixed vs all-hot at equal bytes, and the quality cost.

python benchmarks/bench_mixed.py --model tiny        # writes benchmarks/results/mixed-tiny.json
python -m analysis.mixed_precision benchmarks/results/mixed-tiny.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis._runs import fail, md_table
from specdec.core.errors import SpecdecError

LABEL = {
    "all_hot": "all-hot",
    "mixed": "mixed, split by bytes",
    "mixed_access_split": "mixed, split by accesses",
}


def budget_table(result: dict) -> str:
    base = {r["budget_pct"]: r for r in result["rows"] if r["kind"] == "all_hot"}
    body = []
    for r in result["rows"]:
        b = base[r["budget_pct"]]
        slots = f"{r['cache_slots']}"
        if "hot_slots" in r:
            slots += f" ({r['hot_slots']} + {r['cold_slots']})"
        ratio = r["bytes_per_token"] / b["bytes_per_token"] if b["bytes_per_token"] else 0
        body.append(
            [
                f"{r['budget_pct']:g}% ({r['cache_bytes'] / 1e6:.2f} MB)",
                LABEL[r["kind"]],
                slots,
                f"{r['hit_rate']:.3f}",
                f"{r['bytes_per_token'] / 1e3:.1f}",
                f"{ratio:.2f}x",
            ]
        )
    head = ["budget (cache bytes)", "pack", "slots (hot + cold)", "hit rate", "KB / token"]
    return md_table(head + ["bytes vs all-hot"], body)


def quality_line(result: dict) -> str:
    q, mtp = result["quality"], result.get("mtp") or {}
    text = (
        f"{result['name']}: hot {result['hot_experts']} of {result['experts']} experts "
        f"({result['hot_access_share']:.1%} of profiled accesses); expert bytes "
        f"{result['expert_bytes_all_hot'] / 1e6:.2f} -> {result['expert_bytes_mixed'] / 1e6:.2f} MB; "
        f"held-out loss {q['heldout_loss_all_hot']:.3f} -> {q['heldout_loss_mixed']:.3f}, "
        f"top-1 agreement {q['top1_agreement']:.3f}, KL {q['kl_all_hot_to_mixed']:.4f} "
        f"({q['positions']} positions)"
    )
    hot, mixed = mtp.get("all_hot") or {}, mtp.get("mixed") or {}
    for g in sorted(set(hot) & set(mixed)):
        if hot[g]:
            text += (
                f"; MTP acceptance γ={g} {hot[g]['acceptance']:.3f} -> {mixed[g]['acceptance']:.3f}"
            )
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="benchmarks/results/mixed-NAME.json")
    args = p.parse_args(argv)
    for path in args.results:
        try:
            result = json.loads(Path(path).read_text())
            text = quality_line(result) + "\n" + budget_table(result)
        except (OSError, ValueError) as e:
            return fail(SpecdecError(f"{path}: {e}; run benchmarks/bench_mixed.py first"))
        except (KeyError, TypeError) as e:  # JSON, but not what bench_mixed.py writes
            return fail(
                SpecdecError(
                    f"{path}: not a bench_mixed.py result (no {e}); "
                    "run benchmarks/bench_mixed.py to write one"
                )
            )
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
