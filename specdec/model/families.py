"""Per-family adapters: where a family keeps its MoE block and how its router computes.

The streamed model never re-implements a family's MoE block: it swaps the block's `switch_mlp`
(the one module that touches routed-expert weights in every mlx-lm MoE family) for a streamed
one, so routing, gate weighting and shared experts run the family's own code, unchanged. An
adapter is needed only where specdec must evaluate a router *outside* that code: cache-only
self-drafts (renormalise the gates over resident experts), router lookahead (layer L+d's router
on layer L's input) and trace recording. Each `route` below mirrors the family's `__call__` line
for line; tests check it against the family's own selection.

Add a family: write its `route`, register it in FAMILIES, add it to `make-random`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from specdec.errors import SpecdecError

Route = Callable[[nn.Module, mx.array], tuple[mx.array, mx.array]]


def _route_gate_tuple(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """DeepSeek V3 and siblings: `block.gate(x)` already returns (indices, scores)."""
    return block.gate(x)


def _route_qwen3(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    gates = mx.softmax(block.gate(x), axis=-1, precise=True)  # [..., E]
    k = block.top_k
    inds = mx.argpartition(gates, kth=-k, axis=-1)[..., -k:]  # [..., k]
    scores = mx.take_along_axis(gates, inds, axis=-1)
    if block.norm_topk_prob:
        scores /= mx.sum(scores, axis=-1, keepdims=True)
    return inds, scores


def _route_qwen2(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    gates = mx.softmax(block.gate(x), axis=-1, precise=True)
    k = block.top_k
    inds = mx.argpartition(-gates, kth=k - 1, axis=-1)[..., :k]
    return inds, mx.take_along_axis(gates, inds, axis=-1)


def _route_mixtral(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    gates = block.gate(x)
    k = block.num_experts_per_tok
    inds = mx.argpartition(-gates, kth=k - 1, axis=-1)[..., :k]
    scores = mx.softmax(mx.take_along_axis(gates, inds, axis=-1), axis=-1, precise=True)
    return inds, scores


def _route_minimax(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    scores = mx.sigmoid(block.gate(x.astype(mx.float32)))
    k = block.num_experts_per_tok
    inds = mx.argpartition(-(scores + block.e_score_correction_bias), kth=k - 1, axis=-1)[..., :k]
    picked = mx.take_along_axis(scores, inds, axis=-1)
    picked = picked / (mx.sum(picked, axis=-1, keepdims=True) + 1e-20)
    return inds, picked.astype(x.dtype)


@dataclass(frozen=True)
class Family:
    """How one mlx-lm model family routes; `moe_attr` is the decoder layer's MoE attribute."""

    name: str
    moe_attr: str
    route: Route


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("deepseek_v3", "mlp", _route_gate_tuple),
        Family("deepseek_v32", "mlp", _route_gate_tuple),
        Family("glm4_moe", "mlp", _route_gate_tuple),
        Family("kimi_k25", "mlp", _route_gate_tuple),
        Family("qwen3_moe", "mlp", _route_qwen3),
        Family("qwen2_moe", "mlp", _route_qwen2),
        Family("mixtral", "block_sparse_moe", _route_mixtral),
        Family("minimax", "block_sparse_moe", _route_minimax),
    )
}


def get_family(model_type: str) -> Family:
    """The adapter of `model_type` (config.json's field); a clear error for any other."""
    if model_type not in FAMILIES:
        raise SpecdecError(
            f"unknown model family {model_type!r}: specdec streams "
            f"{', '.join(sorted(FAMILIES))}; add an adapter in specdec/model/families.py"
        )
    return FAMILIES[model_type]


def moe_blocks(model: nn.Module, family: Family) -> dict[int, nn.Module]:
    """{decoder layer index: MoE block} for the layers whose block routes experts."""
    blocks = {}
    for i, layer in enumerate(model.layers):
        block = getattr(layer, family.moe_attr, None)
        if block is not None and "switch_mlp" in block:
            blocks[i] = block
    return blocks
