"""docs/results/gamma-auto.md: `--gamma auto` vs plain vs best fixed γ, on the bench's outputs.

    python benchmarks/bench_gamma_auto.py replay --trace minimax --positions 2000 --jobs 2
    python benchmarks/bench_gamma_auto.py replay --trace tiny --positions 4000 --jobs 2
    python benchmarks/bench_gamma_auto.py runtime --tokens 256
    python -m analysis.gamma_auto            # prints the results table, writes docs/gamma-auto.md

Per setting (trace, draft compute, budget, α; runtime: budget, drafter), three readings:

- (a) never lose, the hard target: auto's bytes per committed token over plain decoding's, and
  plain's modeled tokens per second over auto's; each <= 1.03, else ✗.
- (b) near the best that never loses: the fastest fixed γ whose own bytes and time are within
  1.03x of plain's (plain itself qualifies); its modeled tokens per second over auto's <= 1.05,
  else ✗.
- (c) the unconstrained fastest and leanest fixed γ, shown with auto's time and bytes ratio to
  them. Read as Pareto: a fixed γ is a miss (✗) if it is more than 5% better than auto in one
  metric and not worse in the other; more than 5% better in one but worse in the other is a
  conflict (⇄: it cannot be matched without giving up the other metric, and (a) forbids it
  wherever that metric is plain's), not a miss.

Nothing is tuned to pass.
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


def _pareto(auto: dict, r: dict) -> str:
    """'✗' if fixed-γ row `r` beats auto by > 5% in one metric and is not worse in the other,
    '⇄' if it beats auto by > 5% in one and is worse in the other, else ''."""
    time = auto["tokens_per_s"] and r["tokens_per_s"] / auto["tokens_per_s"]  # > 1: r faster
    nbytes = r["bytes_per_token"] and auto["bytes_per_token"] / r["bytes_per_token"]  # > 1: leaner
    if time > NEAR_BEST or nbytes > NEAR_BEST:
        return "✗" if time >= 1.0 and nbytes >= 1.0 else "⇄"
    return ""


def ratios(group: list[dict]) -> dict | None:
    """Auto against plain, the best never-losing fixed γ and the Pareto front of one setting's
    rows (None without auto)."""
    ok = [r for r in group if "skipped" not in r]
    auto = next((r for r in ok if r["gamma"] == "auto"), None)
    plain = next((r for r in ok if r["gamma"] == "1"), None)
    fixed = [r for r in ok if r["gamma"] != "auto"]
    if auto is None or plain is None:
        return None

    def vs_plain(r: dict) -> tuple[float, float]:
        return (
            r["bytes_per_token"] / plain["bytes_per_token"],
            plain["tokens_per_s"] / r["tokens_per_s"],
        )

    safe = [r for r in fixed if max(vs_plain(r)) <= NEVER_LOSE]
    best_safe = max(safe, key=lambda r: r["tokens_per_s"])
    fastest = max(fixed, key=lambda r: r["tokens_per_s"])
    leanest = min(fixed, key=lambda r: r["bytes_per_token"])
    marks = {r["gamma"]: _pareto(auto, r) for r in fixed}
    return {
        "bytes_vs_plain": vs_plain(auto)[0],
        "time_vs_plain": vs_plain(auto)[1],
        "time_vs_safe": best_safe["tokens_per_s"] / auto["tokens_per_s"],
        "safe_gamma": best_safe["gamma"],
        "time_vs_fastest": fastest["tokens_per_s"] / auto["tokens_per_s"],
        "bytes_vs_leanest": auto["bytes_per_token"] / leanest["bytes_per_token"],
        "fastest": fastest["gamma"],
        "leanest": leanest["gamma"],
        "misses": [g for g, m in marks.items() if m == "✗"],
        "conflicts": [g for g, m in marks.items() if m == "⇄"],
        "marks": marks,
        "auto_hist": auto.get("gamma_hist") or [],
        "auto_tps": auto["tokens_per_s"],
        "plain_tps": plain["tokens_per_s"],
        "best_tps": fastest["tokens_per_s"],
        "lossless": auto["tokens"] == plain["tokens"] if "tokens" in auto else None,
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
        fast, lean = q["marks"][q["fastest"]], q["marks"][q["leanest"]]
        body.append([
            *map(str, key),
            _mark(q["bytes_vs_plain"], NEVER_LOSE), _mark(q["time_vs_plain"], NEVER_LOSE),
            f"{q['safe_gamma']}: " + _mark(q["time_vs_safe"], NEAR_BEST),
            f"{q['fastest']}: {q['time_vs_fastest']:.3f} {fast}".strip(),
            f"{q['leanest']}: {q['bytes_vs_leanest']:.3f} {lean}".strip(),
            f"{q['plain_tps']:.3g} / {q['best_tps']:.3g} / {q['auto_tps']:.3g}",
            _hist(q["auto_hist"]),
            *([] if q["lossless"] is None else ["yes" if q["lossless"] else "NO ✗"]),
        ])  # fmt: skip
    head = [
        *keys,
        "(a) bytes auto/plain",
        "(a) time auto/plain",
        "(b) never-losing fastest γ: time auto/it",
        "(c) fastest γ: time auto/it",
        "(c) leanest γ: bytes auto/it",
        "tok/s plain / fastest / auto",
        "auto's γ",
    ]
    if out and out[0]["lossless"] is not None:
        head.append("tokens == plain")
    return md_table(head, body), out


def summary(name: str, q: list[dict]) -> list:
    def worst(key: str, target: float) -> str:
        return f"{max(x[key] for x in q):.3f} ({sum(x[key] > target for x in q)} ✗)"

    misses = sum(bool(x["misses"]) for x in q)
    conflicts = sum(bool(x["conflicts"]) and not x["misses"] for x in q)
    return [
        name,
        len(q),
        worst("bytes_vs_plain", NEVER_LOSE),
        worst("time_vs_plain", NEVER_LOSE),
        worst("time_vs_safe", NEAR_BEST),
        f"{misses} ✗ / {conflicts} ⇄",
    ]


def load(name: str) -> list[dict] | None:
    path = RESULTS / f"gamma_auto_{name}.json"
    return json.loads(path.read_text())["rows"] if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "gamma-auto.md")
    args = p.parse_args(argv)
    from specdec.gamma import chooser as gamma

    parts = ["# `--gamma auto`: the rule, and the check against plain and every fixed γ\n"]
    parts += ["## How auto chooses (specdec/gamma/chooser.py)\n", gamma.__doc__]
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
    head = ["results", "settings", "(a) bytes auto/plain", "(a) time auto/plain",
            "(b) time auto/never-losing fastest", "(c) Pareto: settings with a miss / only conflicts"]  # fmt: skip
    top = md_table(head, summ) + (
        "\n(worst ratio over the settings, ✗: settings past target (a) 1.03, (b) 1.05; (c) a fixed"
        " γ > 5% better in one metric and not worse in the other: ✗; better in one, worse in"
        " the other: ⇄)"
    )
    parts.insert(5, "\n## Worst case\n\n" + top + "\n")
    args.out.write_text("\n".join(parts) + "\n")
    print(top)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
