"""Routing statistics of a trace, the ones the seed question reports for MiniMax-M2.5.

    specdec trace stats runs/trace-heldout --budget 9GB            # a table
    specdec trace stats /tmp/minimax --budget 1130slots --json     # one JSON object

    from specdec.sim.stats import trace_stats
    s = trace_stats(load_trace("runs/trace-heldout"), budget="9GB")

- overlap: per layer, the mean over consecutive position pairs of |S_t ∩ S_{t-1}| / k (S_t the
  position's experts at that layer); `overlap` is the mean over layers.
- union U(γ): per layer, the distinct experts of each non-overlapping window of γ consecutive
  positions (what a verify pass of γ committed tokens reads), averaged over windows and layers
  (as specdec.decode.trace_union does for the question's measurement).
- lru, static: hit rate of LRU (one cache over all layers) and the knapsack bound of any static
  pinning at `budget`, from specdec.sim.simulate over the same positions.
- skew: per layer, the share of its accesses that go to its busiest tenth of experts, and the
  entropy of its access counts over log(n_experts) (1 = uniform), both averaged over layers.

The JSON form is also a targets file: `specdec trace fit --targets` fits the generator to it.

Pairs and windows never straddle two prompts (prompt_ids.npy), and `phase` keeps only decode
(1) or prefill (0) positions for overlap and unions (runs of consecutive kept positions).
"""

from __future__ import annotations

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.sim.simulate import simulate
from specdec.trace.format import Trace

GAMMAS = (1, 2, 3, 4, 8)
PHASES = {"all": None, "decode": 1, "prefill": 0}


def segments(trace: Trace, phase: str = "all") -> list[tuple[int, int]]:
    """[(start, stop)] runs of consecutive positions of one prompt and the wanted phase."""
    if phase not in PHASES:
        raise SpecdecError(f"phase {phase!r}: use one of {', '.join(PHASES)}")
    T = trace.n_positions
    keep = np.ones(T, dtype=bool)  # [T]
    if PHASES[phase] is not None:
        if trace.phase is None:
            raise SpecdecError(
                f"phase {phase!r} needs phase.npy, which this trace lacks: use --phase all"
            )
        keep = trace.phase == PHASES[phase]
    brk = np.zeros(T, dtype=bool)  # [T]: a new prompt starts here
    if trace.prompt_ids is not None:
        brk[1:] = trace.prompt_ids[1:] != trace.prompt_ids[:-1]
    goes_on = np.append(keep[:-1] & keep[1:] & ~brk[1:], False)  # [T]: t + 1 continues t's run
    first = keep & ~np.insert(goes_on[:-1], 0, False)  # [T]
    last = keep & ~goes_on  # [T]
    return list(
        zip(np.flatnonzero(first).tolist(), (np.flatnonzero(last) + 1).tolist(), strict=True)
    )


def overlap_per_layer(experts: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """[L] mean |S_t ∩ S_{t-1}| / k over consecutive pairs inside the runs; experts [T, L, k]."""
    k = experts.shape[2]
    shared = [  # chunks of 4096 pairs keep the [n, L, k, k] comparison small
        (e[1:, :, :, None] == e[:-1, :, None, :]).any(-1).sum(-1)  # [n - 1, L]
        for a, b in runs
        for c in range(a, b - 1, 4096)
        for e in (experts[c : min(c + 4097, b)],)
    ]
    if not shared:
        return np.full(experts.shape[1], np.nan)
    return np.concatenate(shared).mean(axis=0) / k


def union_per_layer(experts: np.ndarray, runs: list[tuple[int, int]], gamma: int) -> np.ndarray:
    """[L] mean distinct experts per window of γ consecutive positions inside the runs."""
    starts = np.concatenate(
        [np.arange(a, b - gamma + 1, gamma) for a, b in runs] or [np.zeros(0, int)]
    )
    if not len(starts):
        return np.full(experts.shape[1], np.nan)
    w = experts[starts[:, None] + np.arange(gamma)]  # [W, γ, L, k]
    w = np.sort(w.transpose(0, 2, 1, 3).reshape(len(starts), experts.shape[1], -1))  # [W, L, γk]
    return (1 + (w[..., 1:] != w[..., :-1]).sum(-1)).mean(axis=0)


def skew(experts: np.ndarray, n_experts: int) -> tuple[float, float]:
    """(busiest-tenth access share, normalised count entropy), both averaged over layers."""
    T, L, k = experts.shape
    counts = np.stack(
        [np.bincount(experts[:, layer].ravel(), minlength=n_experts) for layer in range(L)]
    )  # [L, E]
    top = max(1, round(n_experts / 10))
    share = np.sort(counts, axis=1)[:, ::-1][:, :top].sum(1) / (T * k)  # [L]
    p = counts / (T * k)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(1) / np.log(n_experts)  # [L]
    return float(share.mean()), float(ent.mean())


def routing_stats(trace: Trace, gammas=GAMMAS, phase: str = "all") -> dict:
    """Overlap and unions (no replay): the cheap part of trace_stats."""
    runs = segments(trace, phase)
    ov = overlap_per_layer(trace.experts, runs)
    return {
        "overlap": _finite(np.mean(ov)),
        "overlap_per_layer": [_finite(round(float(x), 4)) for x in ov],
        "union": {str(g): _finite(union_per_layer(trace.experts, runs, g).mean()) for g in gammas},
    }


def _finite(x: float) -> float | None:
    """None where there was nothing to average (e.g. no window of γ positions)."""
    return float(x) if np.isfinite(x) else None


def trace_stats(
    trace: Trace,
    budget: str | None = None,
    gammas=GAMMAS,
    phase: str = "all",
) -> dict:
    """Every statistic above, over the positions of `phase`; lru/static only when a budget is
    given (they replay the whole trace, every phase)."""
    runs = segments(trace, phase)
    if not runs:
        raise SpecdecError(f"the trace has no {phase} positions: give another --phase")
    chosen = np.concatenate([np.arange(a, b) for a, b in runs])  # [positions of the phase]
    out = {
        "model": trace.model,
        "positions": len(chosen),  # of the phase asked for
        "trace_positions": trace.n_positions,
        "shape": {  # with the statistics below, a targets file for `specdec trace fit`
            "n_layers": trace.n_layers,
            "n_experts": trace.n_experts,
            "top_k": trace.top_k,
            "expert_bytes": trace.slot_bytes,
        },
        "phase": phase,
        **routing_stats(trace, gammas, phase),
    }
    out["top10_share"], out["entropy"] = skew(trace.experts[chosen], trace.n_experts)
    if budget is not None:
        lru, static = simulate(trace, ["lru", "knapsack_bound"], [Budget.parse(budget)])
        out.update(
            budget=budget,
            budget_slots=lru.budget_slots,
            lru=lru.hit_rate,
            static=static.hit_rate,
        )
    return out
