"""Synthetic routing traces shaped like real ones, for tests and benchmarks of the cache layer.

    from specdec.trace.synthetic import synthetic_trace
    trace = synthetic_trace(n_positions=2000, n_layers=16, n_experts=64, top_k=8, seed=0)

Each layer has its own skewed expert popularity (Zipf-like, exponent `skew`, random order per
layer), and each position keeps a fraction `reuse` of the previous position's experts at that
layer: real routers show both (a hot set per layer; about a third of a token's top-8 shared with
the previous token in the MiniMax measurement of the seed question). Not a substitute for a
recorded trace when a number is reported about a model.
"""

from __future__ import annotations

import numpy as np

from specdec.trace.format import Trace


def synthetic_trace(
    n_positions: int,
    n_layers: int = 16,
    n_experts: int = 64,
    top_k: int = 8,
    *,
    skew: float = 0.8,
    reuse: float = 0.35,
    expert_bytes: int | list[int] = 1 << 20,
    seed: int = 0,
) -> Trace:
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, n_experts + 1) ** skew  # [E]
    probs = np.stack([rng.permutation(weight) for _ in range(n_layers)])  # [L, E]
    probs /= probs.sum(axis=1, keepdims=True)
    experts = np.zeros((n_positions, n_layers, top_k), dtype=np.int32)  # [T, L, k]
    for t in range(n_positions):
        for layer in range(n_layers):
            keep = []
            if t:
                prev = experts[t - 1, layer]
                keep = prev[rng.random(top_k) < reuse].tolist()
            p = probs[layer].copy()
            p[keep] = 0.0
            p /= p.sum()
            fresh = rng.choice(n_experts, size=top_k - len(keep), replace=False, p=p)
            experts[t, layer] = np.concatenate([keep, fresh]).astype(np.int32)
    eb = [expert_bytes] * n_layers if isinstance(expert_bytes, int) else list(expert_bytes)
    return Trace(
        experts=experts,
        n_experts=n_experts,
        expert_bytes=eb,
        model="synthetic",
        source=f"specdec.trace.synthetic seed={seed} skew={skew} reuse={reuse}",
    )
