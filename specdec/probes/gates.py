"""Gates and adaptive top-k: how flat are the gates, and what does dropping experts cost?

    rec = record("tiny", "heldout", keep_inputs=True, sm=sm)      # specdec.probes.record
    rows = gates_table(sm, rec, budgets=[Budget.parse("10%"), Budget.parse("25%")])
    write_gates(rows, "runs/probes")                                # gates.{md,json,png}
    specdec probe gates --model tiny --out runs/probes

Gate mass by slot: each position's k gates sorted from largest to smallest; `mean_gate` is the
raw gate value the family multiplies by (DeepSeek-V3 scales by routed_scaling_factor, so its
gates need not sum to 1), `mean_share` the gate over the position's gate sum.

Block error: the MoE block output y = shared(x) + Σ_i g_i e_i(x) of each decode position, with
e_i the routed experts' outputs (the streamed switch_mlp, i.e. the real expert weights) and the
shared part taken as block(x) - Σ g_i e_i, so no family code is re-implemented. A variant keeps a
subset K of the k experts and renormalises: y' = shared + (Σ_i g_i / Σ_K g_j) Σ_K g_j e_j; its
error is ||y' - y|| / ||y|| per position, averaged over positions and MoE layers. Variants: drop
the lowest-gate expert; drop the experts not resident in an ExpertCache of a given budget
(a `Budget`: share, bytes or slots; `policy`, replayed over the trace's decode positions in order, residency read just before each access).
A position with nothing resident keeps only its shared part.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.cache.spec import PolicySpec
from specdec.core.units import Budget
from specdec.probes.eviction import select_positions
from specdec.probes.registry import Probe, ProbeOutput, register, trace_budget_slots
from specdec.sim.simulate import trace_steps
from specdec.stream.steplog import Call
from specdec.trace.format import Trace


def gate_mass(trace: Trace) -> list[dict]:
    """Mean gate and mean share of the position's gate sum, by slot sorted by gate (1 = largest)."""
    g = -np.sort(-trace.gates.astype(np.float64), axis=-1)  # [T, L, k] descending
    share = g / g.sum(-1, keepdims=True)
    return [
        {
            "kind": "slot",
            "slot": i + 1,
            "mean_gate": float(g[..., i].mean()),
            "mean_share": float(share[..., i].mean()),
        }
        for i in range(g.shape[-1])
    ]


def residency(
    trace: Trace, n_slots: int, policy: PolicySpec | str = "lru"
) -> tuple[np.ndarray, float]:
    """[T, L, k] bool: expert resident just before its access, replaying the trace; hit rate."""
    steps = trace_steps(trace)  # [T][L] sorted keys, aligned with the (sorted) trace experts
    cache = PolicySpec.parse(policy).cache(n_slots)
    out = np.zeros(trace.experts.shape, dtype=bool)
    for t, position in enumerate(steps):
        for j, ks in enumerate(position):
            out[t, j] = [cache.slot_of(k) is not None for k in ks]
            cache.access(ks)
        cache.tick(1)
    return out, cache.hits / max(cache.accesses, 1)


def block_parts(site, x: np.ndarray, experts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(block output y [T, H], routed experts' outputs [T, k, H]) of one MoE block at inputs x."""
    xs = mx.array(x)[None]  # [1, T, H]
    block = site.block
    outs = site.switch(xs, mx.array(experts)[None])[0]  # [T, k, H]
    y = block(xs)[0]  # [T, H]
    return np.array(y.astype(mx.float32)), np.array(outs.astype(mx.float32))


def dropped_error(y: np.ndarray, outs: np.ndarray, g: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Relative error per position of the renormalised subset `keep` [T, k] (see module doc)."""
    routed = np.einsum("tk,tkh->th", g, outs)  # [T, H]
    shared = y - routed
    kg = g * keep
    mass = kg.sum(-1, keepdims=True)  # [T, 1]
    scale = np.where(mass > 0, g.sum(-1, keepdims=True) / np.maximum(mass, 1e-30), 0.0)
    y2 = shared + np.einsum("tk,tkh->th", kg * scale, outs)
    return np.linalg.norm(y2 - y, axis=-1) / np.maximum(np.linalg.norm(y, axis=-1), 1e-30)


def gates_table(
    sm,
    rec,
    budgets: list[Budget],
    policy: PolicySpec | str = "lru",
    max_positions: int = 2000,
) -> list[dict]:
    """Gate mass rows ("slot") then error rows ("drop"); `rec` must keep inputs (Recording)."""
    rows = gate_mass(rec.trace)
    # the decode positions of every prompt, in order: the same replay as the eviction probe
    decode = np.flatnonzero(rec.trace.phase == 1) if rec.trace.phase is not None else None
    trace = rec.trace if decode is None else select_positions(rec.trace, decode)
    decode = np.arange(rec.trace.n_positions) if decode is None else decode
    pick = np.unique(np.linspace(0, len(decode) - 1, min(max_positions, len(decode))).astype(int))
    total = trace.n_layers * trace.n_experts
    variants: dict[str, tuple[np.ndarray, float | None, int | None]] = {}
    lowest = np.ones(trace.experts.shape, bool)  # [T, L, k]
    np.put_along_axis(lowest, trace.gates.argmin(-1)[..., None], False, axis=-1)
    variants["all k experts (check: 0)"] = (np.ones_like(lowest), None, None)
    variants["drop the lowest-gate expert"] = (lowest, None, None)
    for b in budgets:
        n = trace_budget_slots(trace, b)
        mask, hit = residency(trace, n, policy)
        variants[f"drop non-resident ({policy}, {n / total:.0%} budget)"] = (mask, hit, n)
    errs = {name: [] for name in variants}
    from specdec.checkpoint.discover import switch_sites  # here: it imports mlx-lm (seconds)

    sites = switch_sites(sm.model)
    for j, lid in enumerate(trace.layer_ids):
        with sm.streamer.serving(Call("probe")):  # budget 100%: every expert is already resident
            x = rec.inputs[lid][decode[pick]]  # [P, H]
            y, outs = block_parts(sites[lid], x, trace.experts[pick, j])
        g = trace.gates[pick, j].astype(np.float64)  # [P, k]
        for name, (mask, _, _) in variants.items():
            errs[name].append(dropped_error(y, outs, g, mask[pick, j]))
    for name, (mask, hit, n) in variants.items():
        e = np.concatenate(errs[name])
        rows.append(
            {
                "kind": "drop",
                "variant": name,
                "budget_slots": n,
                "budget_share": None if n is None else n / total,
                "hit_rate": hit,
                "mean_kept": float(mask[pick].sum(-1).mean()),
                "rel_error_mean": float(e.mean()),
                "rel_error_median": float(np.median(e)),
                "positions": int(len(pick)),
            }
        )
    return rows


def render_gates(rows: list[dict], title: str = "") -> str:
    from specdec.probes.report import md_table

    slots = [r for r in rows if r["kind"] == "slot"]
    drops = [r for r in rows if r["kind"] == "drop"]
    t1 = md_table(
        ["slot (by gate)", "mean gate", "share of the position's gate sum"],
        [[r["slot"], f"{r['mean_gate']:.3f}", f"{r['mean_share']:.3f}"] for r in slots],
    )
    t2 = md_table(
        ["experts kept", "cache hit rate", "mean kept of k", "block error (mean)", "(median)"],
        [
            [
                r["variant"],
                "" if r["hit_rate"] is None else f"{r['hit_rate']:.1%}",
                f"{r['mean_kept']:.2f}",
                f"{r['rel_error_mean']:.1%}",
                f"{r['rel_error_median']:.1%}",
            ]
            for r in drops
        ],
    )
    head = f"{title}\n\n" if title else ""
    n = drops[0]["positions"] if drops else 0
    return f"{head}Gate mass by slot:\n\n{t1}\nRelative MoE block error, renormalised ({n} decode positions x layers):\n\n{t2}"


def write_gates(rows: list[dict], out_dir: str | Path, title: str = "") -> dict:
    import matplotlib.pyplot as plt

    from specdec.probes.report import write_report

    slots = [r for r in rows if r["kind"] == "slot"]
    drops = [r for r in rows if r["kind"] == "drop"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    a1.bar([r["slot"] for r in slots], [r["mean_share"] for r in slots], color="tab:blue")
    a1.set_xticks([r["slot"] for r in slots])
    a1.set_xlabel("slot, sorted by gate (1 = largest)")
    a1.set_ylabel("mean share of the position's gate sum")
    a1.set_title("gate mass by slot")
    res = [r for r in drops if r["budget_share"] is not None]
    a2.plot(
        [100 * r["budget_share"] for r in res],
        [100 * r["rel_error_mean"] for r in res],
        marker="o",
        label="drop non-resident experts",
    )
    low = next(r for r in drops if r["variant"].startswith("drop the lowest"))
    a2.axhline(
        100 * low["rel_error_mean"], color="tab:red", ls="--", label="drop lowest-gate expert"
    )
    a2.set_xlabel("cache budget (% of all routed experts)")
    a2.set_ylabel("relative MoE block error (%)")
    a2.set_title("error of renormalised dropping")
    a2.set_ylim(bottom=0)
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return write_report(out_dir, "gates", rows, render_gates(rows, title), fig)


@register
class Gates(Probe):
    """How flat the gates are, and the MoE block error of dropping experts (the lowest-gate
    one; those not resident in a `policy` cache at each budget), on the model's MoE inputs."""

    name = "gates"
    listed = 10
    needs = ("inputs", "model")
    options = ("model", "prompts", "limit", "max_tokens", "budgets", "policy")

    @classmethod
    def run(cls, opts, ctx) -> ProbeOutput:
        from specdec.probes.record import record
        from specdec.stream.loader import load

        # a model of its own, not the context's: the blocks run here leave the streamer's
        # deferred steps of an all-resident model behind, which a later recording would count
        sm = load(opts.model, budget="100%", with_mtp=False)
        rec = record(
            opts.model, opts.prompts, opts.max_tokens, limit=opts.limit, keep_inputs=True, sm=sm
        )
        rows = gates_table(sm, rec, opts.budgets, opts.policy)
        return ProbeOutput(rows, write_gates(rows, opts.out, f"Gates on {opts.where}."))
