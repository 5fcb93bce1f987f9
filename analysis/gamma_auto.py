"""README "`--gamma auto` vs plain vs best fixed γ": the targets checked on the bench's outputs.

    python benchmarks/bench_gamma_auto.py replay --trace minimax --positions 1000 --jobs 2
    python benchmarks/bench_gamma_auto.py replay --trace tiny --jobs 2
    python benchmarks/bench_gamma_auto.py runtime
    python -m analysis.gamma_auto            # prints the README tables, writes docs/gamma-auto.md

Per setting (trace, draft compute, budget, α; runtime: budget, drafter): auto's bytes per
committed token over plain's and plain's modeled time per token over auto's (target: both
<= 1.03), and auto against the best fixed γ — by modeled time and, apart, by bytes (target
<= 1.05 each). A ratio past its target is marked ✗; nothing is tuned to pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis._runs import md_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NEVER_LOSE, NEAR_BEST = 1.03, 1.05


def _mark(x: float, target: float) -> str:
    return f"{x:.3f}" + ("" if x <= target else " ✗")


def ratios(group: list[dict]) -> dict | None:
    """Auto against plain and the best fixed γ of one setting's rows (None without auto)."""
    ok = [r for r in group if "skipped" not in r]
    auto = next((r for r in ok if r["gamma"] == "auto"), None)
    plain = next((r for r in ok if r["gamma"] == "1"), None)
    fixed = [r for r in ok if r["gamma"] != "auto"]
    if auto is None or plain is None:
        return None
    same = auto["tokens"] == plain["tokens"] if "tokens" in auto else None  # runtime: lossless
    fastest = max(fixed, key=lambda r: r["tokens_per_s"])
    leanest = min(fixed, key=lambda r: r["bytes_per_token"])
    return {
        "bytes_vs_plain": auto["bytes_per_token"] / plain["bytes_per_token"],
        "time_vs_plain": plain["tokens_per_s"] / auto["tokens_per_s"],
        "time_vs_best": fastest["tokens_per_s"] / auto["tokens_per_s"],
        "bytes_vs_best": auto["bytes_per_token"] / leanest["bytes_per_token"],
        "best_time_gamma": fastest["gamma"],
        "best_bytes_gamma": leanest["gamma"],
        "auto_hist": auto.get("gamma_hist") or [],
        "auto_tps": auto["tokens_per_s"],
        "plain_tps": plain["tokens_per_s"],
        "best_tps": fastest["tokens_per_s"],
        "lossless": same,
    }


def _hist(h: list[int]) -> str:
    total = sum(h) or 1
    return " ".join(f"{g}:{100 * n / total:.0f}%" for g, n in enumerate(h) if n)


def detail(rows: list[dict], keys: tuple[str, ...]) -> tuple[str, list[dict]]:
    """One markdown row per setting, and the ratios."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    body, out = [], []
    for key, group in groups.items():
        q = ratios(group)
        if q is None:
            continue
        out.append(q)
        body.append([
            *map(str, key),
            _mark(q["bytes_vs_plain"], NEVER_LOSE), _mark(q["time_vs_plain"], NEVER_LOSE),
            f"{q['best_time_gamma']}: " + _mark(q["time_vs_best"], NEAR_BEST),
            f"{q['best_bytes_gamma']}: " + _mark(q["bytes_vs_best"], NEAR_BEST),
            f"{q['plain_tps']:.3g} / {q['best_tps']:.3g} / {q['auto_tps']:.3g}",
            _hist(q["auto_hist"]),
            *([] if q["lossless"] is None else ["yes" if q["lossless"] else "NO ✗"]),
        ])  # fmt: skip
    head = [
        *keys,
        "bytes auto/plain",
        "time auto/plain",
        "best γ (time): auto/best",
        "best γ (bytes): auto/best",
        "tok/s plain / best / auto",
        "auto's γ",
    ]
    if out and out[0]["lossless"] is not None:
        head.append("tokens == plain")
    return md_table(head, body), out


def summary(name: str, q: list[dict]) -> list:
    worst = {k: max(x[k] for x in q) for k in q[0] if k.endswith(("plain", "best"))}
    miss = {
        k: sum(x[k] > (NEVER_LOSE if k.endswith("plain") else NEAR_BEST) for x in q) for k in worst
    }
    return [name, len(q)] + [f"{worst[k]:.3f} ({miss[k]} ✗)" for k in worst]


def load(name: str) -> list[dict] | None:
    path = RESULTS / f"gamma_auto_{name}.json"
    return json.loads(path.read_text())["rows"] if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "gamma-auto.md")
    args = p.parse_args(argv)
    from specdec.decode import gamma

    parts = ["# `--gamma auto`: the rule, and the check against plain and every fixed γ\n"]
    parts += ["## How auto chooses (specdec/decode/gamma.py)\n", gamma.__doc__]
    parts += ["## The check (analysis/gamma_auto.py)\n", __doc__]
    summ = []
    for name, keys in (
        ("minimax", ("draft_compute", "budget", "alpha")),
        ("tiny", ("draft_compute", "budget", "alpha")),
        ("runtime", ("budget", "drafter")),
    ):
        rows = load(name)
        if rows is None:
            continue
        table, q = detail(rows, keys)
        parts += [f"\n## {name}\n", table]
        if q:
            summ.append(summary(name, q))
    head = ["results", "settings", "bytes auto/plain", "time auto/plain", "time auto/best",
            "bytes auto/best"]  # fmt: skip
    top = md_table(head, summ) + "\n(worst ratio over the settings; ✗: settings past target)"
    parts.insert(5, "\n## Worst case\n\n" + top + "\n")
    args.out.write_text("\n".join(parts) + "\n")
    print(top)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
