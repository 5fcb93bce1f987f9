"""Router adapters: how a family's MoE block picks its experts, for code outside the block.

Streaming needs no per-family code: `specdec.checkpoint.discover` finds each layer's switch module
(SwitchGLU / SwitchMLP) by type and the loader swaps where its projections read their weights, so
routing, gate weighting, shared experts and the family's activation run the family's own code.
A `route` is needed only where specdec evaluates a router *outside* that code: cache-only
self-drafts (renormalise the gates over resident experts), router lookahead (layer L+d's router on
layer L's input) and trace recording. Each `route` below mirrors the family's `__call__` line for
line and returns (indices, scores) aligned with the indices the block passes its switch module;
tests/checkpoint/test_families.py checks both against the family's own block. A family without one streams
and decodes with every other drafter; those three features say so in one line (`require_route`).

Add a family: write its `route`, add its row to FAMILIES (its tiny config: tiny_configs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from specdec.checkpoint.tiny_configs import COMMON, TINY, VOCAB
from specdec.core.errors import SpecdecError

Route = Callable[[nn.Module, mx.array], tuple[mx.array, mx.array]]


def _tuple_router(attr: str) -> Route:
    """Families whose router module already returns (indices, scores): `block.<attr>(x)`."""

    def route(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
        return getattr(block, attr)(x)

    return route


def _route_deepseek_v41(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """DeepSeek-V4.1 routes the flattened positions: [B*L, k], as its experts module sees them."""
    return block.gate(x.reshape(-1, block.dim))


def _softmax_topk_high(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """Qwen3-MoE / Qwen3-Next: softmax, the top k from the high end, optional renormalisation."""
    gates = mx.softmax(block.gate(x), axis=-1, precise=True)  # [..., E]
    k = block.top_k
    inds = mx.argpartition(gates, kth=-k, axis=-1)[..., -k:]  # [..., k]
    scores = mx.take_along_axis(gates, inds, axis=-1)
    if block.norm_topk_prob:
        scores /= mx.sum(scores, axis=-1, keepdims=True)
    return inds, scores


def _softmax_topk(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """Qwen2-MoE / Hunyuan: softmax, the top k of the negated gates, no renormalisation."""
    gates = mx.softmax(block.gate(x), axis=-1, precise=True)
    k = block.top_k
    inds = mx.argpartition(-gates, kth=k - 1, axis=-1)[..., :k]
    return inds, mx.take_along_axis(gates, inds, axis=-1)


def _topk_softmax(attr: str, k_attr: str) -> Route:
    """Mixtral / Jamba: top k of the logits, softmax over the chosen ones."""

    def route(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
        gates = getattr(block, attr)(x)
        k = getattr(block, k_attr)
        inds = mx.argpartition(-gates, kth=k - 1, axis=-1)[..., :k]
        scores = mx.softmax(mx.take_along_axis(gates, inds, axis=-1), axis=-1, precise=True)
        return inds, scores

    return route


def _route_minimax(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    scores = mx.sigmoid(block.gate(x.astype(mx.float32)))
    k = block.num_experts_per_tok
    inds = mx.argpartition(-(scores + block.e_score_correction_bias), kth=k - 1, axis=-1)[..., :k]
    picked = mx.take_along_axis(scores, inds, axis=-1)
    picked = picked / (mx.sum(picked, axis=-1, keepdims=True) + 1e-20)
    return inds, picked.astype(x.dtype)


def _route_olmoe(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """OLMoE routes the flattened positions: [B*L, k], as its switch module sees them."""
    weights = mx.softmax(block.gate(x.reshape(-1, x.shape[-1])), axis=1, precise=True)
    k = block.top_k
    inds = mx.argpartition(-weights, kth=k - 1, axis=-1)[..., :k]  # [T, k]
    scores = mx.take_along_axis(weights, inds, axis=-1)
    if block.norm_topk_prob:
        scores = scores / scores.sum(axis=-1, keepdims=True)
    return inds, scores


def _route_phimoe(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    from mlx_lm.models.phimoe import sparsemixer

    return sparsemixer(block.gate(x), top_k=block.top_k, jitter_eps=block.jitter_eps)


def _route_ernie(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    gates = block.gate_act(block.gate(x).astype(mx.float32))
    k = block.k
    inds = mx.argpartition(-gates, kth=k - 1, axis=-1)[..., :k]
    scores = mx.take_along_axis(gates, inds, axis=-1)
    return inds, scores / mx.maximum(scores.sum(axis=-1, keepdims=True), 1e-12)


def _route_lfm2(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    weights = mx.sigmoid(block.gate(x))
    k = block.top_k
    if block.use_expert_bias:
        biased = weights.astype(mx.float32) + block.expert_bias
        inds = mx.argpartition(biased, kth=-k, axis=-1)[..., -k:]
    else:
        inds = mx.argpartition(weights, kth=-k, axis=-1)[..., -k:]
    scores = mx.take_along_axis(weights, inds, axis=-1)
    if block.norm_topk_prob:
        scores = scores / (mx.sum(scores, axis=-1, keepdims=True) + 1e-6)
    return inds, (scores * block.routed_scaling_factor).astype(x.dtype)


def _route_llama4(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    """Llama 4 scales the experts' *input* by its score; top-1, so renormalising keeps it."""
    logits = block.router(x)
    k = block.top_k
    inds = mx.argpartition(-logits, kth=k - 1, axis=-1)[..., :k]
    scores = mx.take_along_axis(logits, inds, axis=-1)
    return inds, mx.sigmoid(scores.astype(mx.float32)).astype(x.dtype)


def _route_gpt_oss(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    from mlx_lm.models.gpt_oss import mlx_topk

    experts, inds = mlx_topk(block.router(x), k=block.num_experts_per_tok, axis=-1)
    return inds, mx.softmax(experts, axis=-1, precise=True)


def _route_klear(block: nn.Module, x: mx.array) -> tuple[mx.array, mx.array]:
    weights = mx.sigmoid(block.gate(x).astype(mx.float32))
    biased = weights + block.expert_bias.reshape((1, 1, -1))
    k = block.top_k
    inds = mx.argpartition(-biased, kth=k - 1, axis=-1)[..., :k]
    scores = mx.take_along_axis(weights, inds, axis=-1)
    if block.norm_topk_prob:
        scores = scores / mx.sum(scores, axis=-1, keepdims=True)
    return inds, scores.astype(x.dtype)


@dataclass(frozen=True)
class Family:
    """A model family (config.json's `model_type`): its router adapter (None: none written), its
    MTP layout (a key of specdec.checkpoint.mtp.LAYOUTS; None: no MTP module), the tiny
    config.json `make-random` builds it from (None: make-random does not build it), and whether
    one position's experts are always k distinct ones (its router takes the top k of its scores
    and passes them on as they are: every row below, checked on its tiny checkpoint by
    tests/checkpoint/test_families.py; not LongCat-Flash's, which maps its zero-computation
    experts to expert 0): at full budget a plain decode step's cache step is then known without
    its routing (specdec.stream.streamer, counted steps)."""

    name: str
    route: Route | None = None
    mtp: str | None = None
    tiny: dict | None = field(default=None, compare=False, repr=False)
    distinct_picks: bool = False

    def require_route(self, feature: str) -> Route:
        """The route, or a one-line error naming the feature that needs it."""
        if self.route is None:
            raise SpecdecError(
                f"{feature} evaluates the router outside {self.name}'s own code and specdec has "
                f"no router adapter for {self.name}: run without it (streaming and the other "
                "drafters work), or add a `route` in specdec/checkpoint/families.py"
            )
        return self.route


def _row(name: str, route: Route | None, mtp: str | None = None) -> Family:
    return Family(name, route, mtp, TINY.get(name), distinct_picks=True)


_gate = _tuple_router("gate")
_router = _tuple_router("router")
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        _row("deepseek_v3", _gate, mtp="deepseek_v3"),
        _row("deepseek_v32", _gate, mtp="deepseek_v3"),
        _row("kimi_k25", _gate, mtp="deepseek_v3"),
        _row("kimi_k2", None, mtp="deepseek_v3"),  # mlx-lm runs it as deepseek_v3
        _row("deepseek", _gate),
        _row("deepseek_v2", _gate),
        _row("deepseek_v41", _route_deepseek_v41, mtp="deepseek_v4"),  # ds4's V4 Flash layout
        _row("glm4_moe", _gate, mtp="deepseek_v3"),
        _row("glm4_moe_lite", _gate),
        _row("dots1", _gate),
        _row("bailing_moe", _gate),
        _row("exaone_moe", _gate),
        _row("nemotron_h", _gate),
        _row("granitemoe", _router),
        _row("granitemoehybrid", _router),
        _row("qwen3_moe", _softmax_topk_high),
        _row("qwen3_next", _softmax_topk_high, mtp="qwen3_next"),
        _row("qwen2_moe", _softmax_topk),
        _row("hunyuan", _softmax_topk),
        _row("mixtral", _topk_softmax("gate", "num_experts_per_tok")),
        _row("jamba", _topk_softmax("router", "num_experts_per_tok")),
        _row("minimax", _route_minimax),
        _row("olmoe", _route_olmoe),
        _row("phimoe", _route_phimoe),
        _row("ernie4_5_moe", _route_ernie),
        _row("lfm2_moe", _route_lfm2),
        _row("llama4", _route_llama4),
        _row("gpt_oss", _route_gpt_oss),
        _row("Klear", _route_klear),
    )
}


def get_family(model_type: str) -> Family:
    """The family of `model_type` (config.json's field); one without a router adapter streams."""
    return FAMILIES.get(model_type) or Family(model_type)


def family_config(family: str) -> dict:
    """The scaled-down config.json contents `make-random` writes for a family (vocab included)."""
    tiny = FAMILIES[family].tiny if family in FAMILIES else None
    if tiny is None:
        raise SpecdecError(
            f"make-random has no tiny config for {family!r}; supported: "
            f"{', '.join(sorted(TINY_FAMILIES))}"
        )
    return {"model_type": family, **COMMON, **tiny, "vocab_size": VOCAB}


TINY_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.tiny is not None)
