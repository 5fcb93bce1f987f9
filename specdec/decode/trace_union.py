"""The question's own union measurement: union along the committed trace, no drafting.

A plain greedy run records the experts every decode position routes to, per MoE layer; the
union at γ is then the mean, over layers and over non-overlapping windows of γ consecutive
positions, of the number of distinct experts in the window. That is what a verify pass would
read if every draft were right. Real verify batches (records of a drafted run) also include the
routing of rejected drafts; `union_ratio` compares the two.
"""

from __future__ import annotations

import numpy as np

from specdec.decode.routing import recording
from specdec.decode.run import plain_greedy
from specdec.stream.loader import StreamedModel


def record_decode_routing(
    sm: StreamedModel, prompt: list[int], max_tokens: int
) -> dict[int, np.ndarray]:
    """{layer: [T, k] experts} of the decode positions of a plain greedy run (cache reset after)."""
    with recording(sm) as rec:
        plain_greedy(sm, prompt, max_tokens, stop_at_eos=False)
    return rec.verify_routing()


def window_unions(experts: np.ndarray, gamma: int) -> np.ndarray:
    """Distinct experts in each non-overlapping window of γ positions; experts: [T, k]."""
    n = len(experts) // gamma
    windows = np.sort(experts[: n * gamma].reshape(n, gamma * experts.shape[-1]))  # [n, γ·k]
    # distinct ids of a sorted row: 1 + its changes (as trace.stats.union_per_layer counts)
    return 1 + (windows[:, 1:] != windows[:, :-1]).sum(1)


def trace_union(
    sm: StreamedModel, prompt: list[int], max_tokens: int, gammas: list[int]
) -> dict[int, dict]:
    """{γ: {"mean": float, "per_layer": {layer: float}, "windows": int}} along the committed trace.

    A γ longer than the decoded positions (max_tokens - 1: the first token comes from the
    prefill) has no window and is left out, so nothing downstream averages an empty list.
    """
    routing = record_decode_routing(sm, prompt, max_tokens)
    out = {}
    for g in gammas:
        per_layer = {layer: window_unions(e, g) for layer, e in routing.items()}
        if not per_layer or min(len(v) for v in per_layer.values()) == 0:
            continue
        vals = np.concatenate(list(per_layer.values()))
        out[g] = {
            "mean": float(vals.mean()),
            "per_layer": {str(k): float(v.mean()) for k, v in per_layer.items()},
            "windows": int(min(len(v) for v in per_layer.values())),
        }
    return out


def consecutive_overlap(sm: StreamedModel, prompt: list[int], max_tokens: int) -> float | None:
    """Mean share of a position's top-k also selected by the previous position (decode trace);
    None with fewer than two decoded positions."""
    routing = record_decode_routing(sm, prompt, max_tokens)
    shares = [
        len(np.intersect1d(e[t], e[t - 1])) / e.shape[1]
        for e in routing.values()
        for t in range(1, len(e))
    ]
    return float(np.mean(shares)) if shares else None
