"""The eviction-key experiment: recency vs hotness vs any static pinning, against the bounds.

    rows = eviction_table(load_trace("runs/trace-heldout"), load_trace("runs/trace-profile"),
                          budgets=[Budget.parse("5%"), Budget.parse("10%")])
    write_eviction(rows, "runs/probes")                        # eviction.{md,json,png}
    specdec probe eviction --model tiny --out runs/probes

Policies, all replayed through the runtime's own ExpertCache by specdec.sim.simulate:
`hotness` (ds4's key: route hotness first, recency breaks ties; counters seeded and the cache
preloaded from the hotlist), `lru`, `slru`, `lfu`, `static` (pins the hotlist), and the offline
bounds `knapsack_bound` (fractional knapsack over the evaluated trace's own hit counts: no static
pinning can beat it), `belady` (MIN with every miss admitted) and `opt_bypass` (the optimum when
a miss may bypass the cache, warm-started: no policy at all, static included, can beat it, for
equal-size experts).
The hotlist comes from a DIFFERENT trace (the profile prompts), as ds4's compiled hotlist does:
profiling on the evaluated prompts would flatter static and hotness.

Budgets are `Budget`s: shares of all routed experts of the model (`10%`), bytes or slots, turned
into whole slots (specdec.probes.registry.budget_slots).
`positions="decode"` (default) keeps the decode positions of every prompt in order, so the cache
runs across many prompts, as a server's would; "prefill" keeps the prompt positions instead,
replayed one by one: the model's routing on real text, teacher-forced, which no greedy loop can
flatter (the question's caveat about LRU); "all" replays both.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.probes.registry import Probe, ProbeOutput, register, trace_budget_slots
from specdec.sim.simulate import simulate
from specdec.trace.agree import check_traces_agree
from specdec.trace.format import Trace, hotlist_keys, profile_hotlist

POLICIES = ["lru", "slru", "lfu", "hotness", "static", "knapsack_bound", "belady", "opt_bypass"]
LABELS = {
    "hotness": "hotness-first (ds4)",
    "static": "static (profiled hotlist)",
    "knapsack_bound": "static bound (knapsack)",
    "belady": "Belady (MIN)",
    "opt_bypass": "optimum with bypass (bound)",
}


def select_positions(trace: Trace, keep: np.ndarray) -> Trace:
    """The trace restricted to positions where `keep` [T] holds (order kept)."""
    per_pos = ("experts", "gates", "tokens", "prompt_ids", "phase")
    out = replace(
        trace, **{n: getattr(trace, n)[keep] for n in per_pos if getattr(trace, n) is not None}
    )
    if trace.lookahead is not None:
        out.lookahead = trace.lookahead[:, keep]
    return out


def repeated_ngrams(trace: Trace, n: int = 4) -> float | None:
    """Share of decoded n-grams that repeat an earlier n-gram of the same prompt's sequence:
    how much of the decoding is a greedy loop (which flatters recency, as the question warns)."""
    if trace.tokens is None or trace.phase is None or trace.prompt_ids is None:
        return None
    seen_total = repeats = 0
    for pid in np.unique(trace.prompt_ids):
        at = np.flatnonzero(trace.prompt_ids == pid)
        toks, phase = trace.tokens[at].tolist(), trace.phase[at]
        grams: set[tuple[int, ...]] = set()
        for i in range(n, len(toks) + 1):
            g = tuple(toks[i - n : i])
            if phase[i - 1]:
                seen_total += 1
                repeats += g in grams
            grams.add(g)
    return repeats / seen_total if seen_total else None


def eviction_table(
    eval_trace: Trace,
    profile_trace: Trace,
    budgets: list[Budget],
    positions: str = "decode",
    policies: list[str] | None = None,
) -> list[dict]:
    """Rows of (policy, budget): hit rate, bytes/token, slots, budget share."""
    if positions not in ("decode", "prefill", "all"):
        raise SpecdecError(f"positions={positions!r}: use 'decode', 'prefill' or 'all'")
    check_traces_agree(eval_trace, profile_trace, "the evaluated trace", "the profile trace")
    loops = repeated_ngrams(eval_trace) if positions == "decode" else None
    if positions != "all" and eval_trace.phase is not None:
        eval_trace = select_positions(eval_trace, eval_trace.phase == (positions == "decode"))
    total = eval_trace.n_layers * eval_trace.n_experts
    slots = sorted({trace_budget_slots(eval_trace, b) for b in budgets})
    hot = hotlist_keys(eval_trace, profile_hotlist(profile_trace))
    results = simulate(eval_trace, policies or POLICIES, [Budget(slots=n) for n in slots], hot)
    rows = []
    for r in results:
        row = asdict(r)
        row["budget_share"] = r.budget_slots / total
        row["label"] = LABELS.get(r.policy, r.policy)
        row["repeated_4grams"] = loops
        row["positions_kind"] = positions
        rows.append(row)
    return rows


def render_eviction(rows: list[dict], title: str = "") -> str:
    from specdec.core.units import format_bytes
    from specdec.probes.report import md_table

    slots = sorted({r["budget_slots"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["policy"], r["budget_slots"]): r for r in rows}
    share = {r["budget_slots"]: r["budget_share"] for r in rows}
    heads = ["policy"] + [f"{share[n]:.0%} ({n} slots)" for n in slots]

    def table(fmt):
        return md_table(
            heads, [[LABELS.get(p, p)] + [fmt(cell[(p, n)]) for n in slots] for p in policies]
        )

    first = rows[0] if rows else {"positions": 0, "repeated_4grams": None}
    loops = first["repeated_4grams"]
    loop_note = "" if loops is None else f"; {loops:.0%} of decoded 4-grams repeat an earlier one"
    if first.get("positions_kind") == "prefill":
        loop_note = "; prompt positions, teacher-forced"
    return (
        (f"{title}\n\n" if title else "")
        + f"Hit rate ({first['positions']} positions replayed{loop_note}):\n\n"
        + table(lambda r: f"{r['hit_rate']:.1%}")
        + "\nBytes read per token (misses only):\n\n"
        + table(lambda r: format_bytes(r["bytes_per_token"]))
    )


def write_eviction(rows: list[dict], out_dir: str | Path, title: str = "") -> dict:
    import matplotlib.pyplot as plt

    from specdec.probes.report import write_report

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for p in dict.fromkeys(r["policy"] for r in rows):
        rs = sorted((r for r in rows if r["policy"] == p), key=lambda r: r["budget_slots"])
        x = [100 * r["budget_share"] for r in rs]
        style = "--" if p in ("knapsack_bound", "belady", "opt_bypass") else "-"
        a1.plot(x, [100 * r["hit_rate"] for r in rs], style, marker="o", label=LABELS.get(p, p))
        a2.plot(
            x, [r["bytes_per_token"] / 2**20 for r in rs], style, marker="o", label=LABELS.get(p, p)
        )
    a1.set_ylabel("hit rate (%)")
    a2.set_ylabel("bytes read per token (MiB)")
    for ax in (a1, a2):
        ax.set_xlabel("cache budget (% of all routed experts)")
        ax.grid(alpha=0.3)
    a1.legend(fontsize=8)
    fig.suptitle(title or "Eviction key: hit rate and bytes/token vs budget")
    kind = rows[0]["positions_kind"] if rows else "decode"
    name = "eviction" if kind == "decode" else f"eviction_{kind}"  # both can sit in one dir
    return write_report(out_dir, name, rows, render_eviction(rows, title), fig)


@register
class Eviction(Probe):
    """Hit rate and bytes/token of every policy and bound at each budget (question §1).
    Headline: LRU's hit rate minus the fractional-knapsack bound of static pinning, averaged
    over the budgets: above zero, recency beats every static policy (the question: 53.0% against
    45.0%)."""

    name = "eviction"
    listed = 20
    needs = ("trace", "profile_trace")
    options = ("trace", "profile_trace", "prompts", "profile_prompts", "budgets", "positions")
    headline_name = "lru_minus_knapsack_bound"

    @classmethod
    def headline(cls, rows: list[dict]) -> float:
        rate = {(r["policy"], r["budget_slots"]): r["hit_rate"] for r in rows}
        budgets = sorted({b for p, b in rate if p == "lru"})
        return float(np.mean([rate["lru", b] - rate["knapsack_bound", b] for b in budgets]))

    @classmethod
    def run(cls, opts, ctx) -> ProbeOutput:
        rows = eviction_table(ctx.eval_trace(), ctx.profile_trace(), opts.budgets, opts.positions)
        src = opts.profile_trace or f"prompts {opts.profile_prompts}"
        title = f"Eviction key on {opts.where}; hotlist profiled on {src}."
        return ProbeOutput(rows, write_eviction(rows, opts.out, title))
