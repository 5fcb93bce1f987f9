"""Router lookahead recall: how much of layer L's real top-k can be known before layer L runs.

    rows = lookahead_table(load_trace("runs/trace-heldout"))   # needs lookahead.npy
    write_lookahead(rows, "runs/probes")                         # lookahead.{md,json,png}
    specdec probe lookahead --model tiny --out runs/probes

Recall of a prediction = |predicted ∩ real top-k| / k, averaged over positions and MoE layers.
Predictors: layer L's router evaluated on the MoE input of the MoE layer d before it (d = 1, 2,
3, counted in MoE layers: what `specdec trace record` stores as lookahead.npy; the question calls
it "router evaluated at L+d", i.e. d layers ahead), and the same layer's selection at the
previous token (the prefetch "use what this layer picked last time"). Layers with no MoE layer
d before them have no prediction and are left out of that row. `recall_decode` counts only decode positions (the prefetch that matters while
generating, but greedy loops of a small model inflate the previous-token row there);
`recall_prompt` only prompt positions (real text, teacher-forced); `recall_all` both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specdec.cache.spec import PolicySpec
from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.probes.registry import Probe, ProbeOutput, register, trace_budget_slots
from specdec.trace.format import Trace


def overlap(pred: np.ndarray, real: np.ndarray) -> np.ndarray:
    """|pred ∩ real| per row of [..., k] id sets (entries < 0 never match); shape [...]."""
    hit = (pred[..., :, None] == real[..., None, :]) & (pred[..., :, None] >= 0)  # [..., k, k]
    return hit.any(-1).sum(-1)


def _mean_recall(
    pred: np.ndarray, real: np.ndarray, mask: np.ndarray, k: int
) -> tuple[float | None, int]:
    """Mean recall over the [T, L] cells where mask holds (None where there is none)."""
    n = int(mask.sum())
    if n == 0:
        return None, 0
    return float(overlap(pred, real)[mask].sum() / (n * k)), n


def lookahead_table(
    trace: Trace, budgets: list[Budget] = (), policy: PolicySpec | str = "lru"
) -> list[dict]:
    """Recall rows (kind "recall"), one per predictor: d, recall over all positions and over
    decode positions only; then, per budget (a share of all routed experts, bytes or slots: see
    specdec.probes.registry.budget_slots), prefetch rows (kind
    "prefetch"): the decode positions replayed through `policy` with no lookahead and with the
    router's predictions d MoE layers ahead prefetched (specdec.sim.simulate, as the runtime's
    --lookahead does): demand misses per token are the reads a layer waits for."""
    if trace.lookahead is None:
        raise SpecdecError(
            "the trace has no lookahead.npy: record it with `specdec trace record` "
            "(--lookahead 1,2,3)"
        )
    e, k = trace.experts, trace.top_k  # [T, L, k]
    T, L = e.shape[:2]
    decode = np.ones(T, bool) if trace.phase is None else trace.phase.astype(bool)  # [T]
    rows = []
    for i, d in enumerate(trace.lookahead_distances):
        pred = trace.lookahead[i]  # [T, L, k]
        valid = (pred >= 0).all(-1)  # [T, L]: layer L - d exists
        rows.append(_row(f"MoE input of layer L-{d} ({d} ahead)", d, pred, e, valid, decode, k))
    prompt = np.zeros(T, int) if trace.prompt_ids is None else trace.prompt_ids
    same = np.zeros((T, L), bool)
    same[1:] = (prompt[1:] == prompt[:-1])[:, None]  # previous position is the same prompt's
    prev = np.concatenate([np.full_like(e[:1], -1), e[:-1]])  # [T, L, k]
    rows.append(_row("same layer, previous token", None, prev, e, same, decode, k))
    for r in rows:
        r["kind"] = "recall"
        r["layer_ids"] = list(trace.layer_ids or range(L))
    return rows + _prefetch_rows(trace, budgets, policy)


def _prefetch_rows(trace: Trace, budgets, policy: PolicySpec | str) -> list[dict]:
    from specdec.probes.eviction import select_positions
    from specdec.sim.simulate import simulate

    if not budgets:
        return []
    if trace.phase is not None:
        trace = select_positions(trace, trace.phase.astype(bool))
    total = trace.n_layers * trace.n_experts
    slots = [Budget(slots=n) for n in sorted({trace_budget_slots(trace, b) for b in budgets})]
    rows = []
    for d in [0, *(d for d in trace.lookahead_distances if 0 < d < trace.n_layers)]:
        for r in simulate(trace, [policy], slots, lookahead=d):
            rows.append(
                {
                    "kind": "prefetch",
                    "policy": str(policy),
                    "d": d,
                    "budget_slots": r.budget_slots,
                    "budget_share": r.budget_slots / total,
                    "hit_rate": r.hit_rate,
                    "demand_misses_per_token": r.misses / max(r.positions, 1),
                    "bytes_per_token": r.bytes_per_token,
                    "prefetch_bytes_per_token": r.prefetch_bytes / max(r.positions, 1),
                    "prefetch_wasted": r.prefetch_wasted,
                    "positions": r.positions,
                }
            )
    return sorted(rows, key=lambda r: (r["budget_slots"], r["d"]))


def _row(name, d, pred, real, valid, decode, k) -> dict:
    r_all, n_all = _mean_recall(pred, real, valid, k)
    r_dec, n_dec = _mean_recall(pred, real, valid & decode[:, None], k)
    r_pre, _ = _mean_recall(pred, real, valid & ~decode[:, None], k)
    per_layer = [
        _mean_recall(pred[:, j], real[:, j], valid[:, j] & decode, k)[0]
        for j in range(real.shape[1])
    ]
    return {
        "predictor": name,
        "d": d,
        "recall_all": r_all,
        "recall_decode": r_dec,
        "recall_prompt": r_pre,
        "cells_all": n_all,
        "cells_decode": n_dec,
        "recall_decode_by_layer": per_layer,
    }


def _pct(v: float | None) -> str:
    return "n/a (no such layer)" if v is None else f"{v:.1%}"


def render_lookahead(rows: list[dict], title: str = "") -> str:
    from specdec.core.units import format_bytes
    from specdec.probes.report import md_table

    recall = [r for r in rows if r["kind"] == "recall"]
    out = (f"{title}\n\n" if title else "") + md_table(
        [
            "router evaluated at",
            "recall (decode)",
            "recall (prompt, teacher-forced)",
            "recall (all)",
        ],
        [
            [
                r["predictor"],
                _pct(r["recall_decode"]),
                _pct(r.get("recall_prompt")),
                _pct(r["recall_all"]),
            ]
            for r in recall
        ],
    )
    pre = [r for r in rows if r["kind"] == "prefetch"]
    if pre:
        out += (
            f"\nPrefetching the predictions ({pre[0]['policy']} cache, {pre[0]['positions']} decode "
            "positions): demand hit rate, reads waited for, bytes read per token (prefetches "
            "included):\n\n"
        )
        out += md_table(
            [
                "budget",
                "lookahead",
                "hit rate",
                "waited reads / token",
                "read / token",
                "of which prefetched",
            ],
            [
                [
                    f"{r['budget_share']:.0%} ({r['budget_slots']} slots)",
                    "none" if r["d"] == 0 else f"{r['d']} ahead",
                    f"{r['hit_rate']:.1%}",
                    f"{r['demand_misses_per_token']:.2f}",
                    format_bytes(r["bytes_per_token"]),
                    format_bytes(r["prefetch_bytes_per_token"]),
                ]
                for r in pre
            ],
        )
    return out


def write_lookahead(rows: list[dict], out_dir: str | Path, title: str = "") -> dict:
    import matplotlib.pyplot as plt

    from specdec.probes.report import write_report

    recall = [r for r in rows if r["kind"] == "recall"]
    pre = [r for r in rows if r["kind"] == "prefetch"]
    fig, axes = plt.subplots(1, 2 if pre else 1, figsize=(12 if pre else 7, 4), squeeze=False)
    ax = axes[0, 0]
    # one colour per distance d in both panels: the router d MoE layers early (left) is the
    # prediction the prefetch d layers ahead reads (right); d = 0 (no lookahead) is grey
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {d: palette[(d - 1) % len(palette)] if d else "0.4" for d in {r["d"] for r in rows}}
    for r in recall:
        ys = [np.nan if v is None else v for v in r["recall_decode_by_layer"]]
        ax.plot(r["layer_ids"], ys, marker="o", color=color[r["d"]], label=r["predictor"])
    ax.set_xticks(recall[0]["layer_ids"] if recall else [])
    ax.set_xlabel("model layer L (MoE layers)")
    ax.set_ylabel("recall of the layer's real top-k (decode positions)")
    ax.set_ylim(0, 1.05)
    ax.set_title("recall by layer")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if pre:
        a2 = axes[0, 1]
        for d in dict.fromkeys(r["d"] for r in pre):
            rs = [r for r in pre if r["d"] == d]
            label = "no lookahead" if d == 0 else f"prefetch {d} MoE layer(s) ahead"
            a2.plot(
                [100 * r["budget_share"] for r in rs],
                [r["demand_misses_per_token"] for r in rs],
                marker="o",
                color=color[d],
                label=label,
            )
        a2.set_xlabel("cache budget (% of all routed experts)")
        a2.set_ylabel("reads waited for per token (demand misses)")
        a2.set_title(f"prefetching the predictions ({pre[0]['policy']})")
        a2.set_ylim(bottom=0)
        a2.grid(alpha=0.3)
        a2.legend(fontsize=8)
    fig.suptitle(title or "Router lookahead")
    return write_report(out_dir, "lookahead", rows, render_lookahead(rows, title), fig)


@register
class Lookahead(Probe):
    """Recall of layer L's router on earlier MoE inputs, and the prefetch replay at each budget
    through `policy` (question §2). Headline: the decode-position recall of the router on the
    MoE input two layers earlier, the question's L+2 row (72.5% on MiniMax-M2.5)."""

    name = "lookahead"
    listed = 30
    needs = ("trace",)  # with lookahead.npy (a recorded one has it)
    options = ("trace", "prompts", "budgets", "policy")
    headline_name = "recall_decode_2_ahead"

    @classmethod
    def headline(cls, rows: list[dict]) -> float | None:
        hit = [r for r in rows if r["kind"] == "recall" and r["d"] == 2]
        return hit[0]["recall_decode"] if hit else None

    @classmethod
    def run(cls, opts, ctx) -> ProbeOutput:
        rows = lookahead_table(ctx.eval_trace(), opts.budgets, opts.policy)
        return ProbeOutput(
            rows, write_lookahead(rows, opts.out, f"Router lookahead recall on {opts.where}.")
        )
