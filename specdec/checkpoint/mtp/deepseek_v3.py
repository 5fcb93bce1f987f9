"""DeepSeek-V3's MTP layout, in MLX (also GLM-4.5's, `glm4_moe`: the same names at the same place
with GLM's own decoder layer).

One MTP module of depth 1, as in DeepSeek-V3 (technical report, section 2.2):

    h'  = eh_proj(concat([enorm(embed(t_{i+1})), hnorm(h_i)]))     # [B, T, H]
    h'' = DecoderLayer_N(h')                                       # full layer with its own MoE
    logits = head(shared_head.norm(h''))                           # predicts t_{i+2}

h_i is the main model's final hidden state at position i. We take what mlx-lm's
`model.model(inputs, cache)` returns, which is *after* the main model's final RMSNorm (the
same choice as vLLM's DeepSeek MTP, whose backbone also returns normalised states); the MTP's
own `hnorm` then re-normalises it. `embed` and `head` are the main model's `embed_tokens` and
`lm_head` (shared, as DeepSeek-V3 does) unless the checkpoint stores `shared_head.head` (GLM-4.5
does). GLM-4.5 follows vLLM's glm4_moe_mtp.py: the same enorm/hnorm/eh_proj/shared_head around
its decoder layer; the state fed back for a chained draft is the layer's output before
`shared_head.norm`, as vLLM returns it for both layouts.

Weights use DeepSeek-V3's checkpoint names under `model.layers.{num_hidden_layers}.`:
`enorm`, `hnorm`, `eh_proj`, `shared_head.norm`, optional `shared_head.head`, and the decoder
layer's own names (`self_attn.*`, `mlp.gate.*`, `mlp.switch_mlp.*`, `mlp.shared_experts.*`, ...)
directly under the prefix. In this module the decoder layer sits at attribute `layer`, so the
streamed loader swaps `mtp.layer.mlp.switch_mlp`.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import glm4_moe
from mlx_lm.models.cache import KVCache
from mlx_lm.models.deepseek_v3 import DeepseekV3DecoderLayer, ModelArgs

from specdec.checkpoint.mtp.base import MTPBase

# The decoder layer of each family with DeepSeek-V3's MTP layout (mlx-lm's own classes).
_DECODER_LAYERS = {
    "deepseek_v3": DeepseekV3DecoderLayer,
    "deepseek_v32": DeepseekV3DecoderLayer,
    "kimi_k25": DeepseekV3DecoderLayer,
    "kimi_k2": DeepseekV3DecoderLayer,  # mlx-lm runs it as deepseek_v3; its config keeps the name
    "glm4_moe": glm4_moe.DecoderLayer,
}


class SharedHead(nn.Module):
    """DeepSeek-V3's `shared_head`: a final norm, and an output head only if not shared."""

    def __init__(self, args: ModelArgs, own_head: bool):
        super().__init__()
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        if own_head:
            self.head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)


class MTPModule(MTPBase):
    """One MTP depth: predicts token i+2 from the main hidden state at i and token i+1."""

    own_parts = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")  # the rest: the decoder layer
    own_head_key = "shared_head.head.weight"

    def __init__(self, args: ModelArgs, own_head: bool = False):
        super().__init__()
        self.args = args
        self.layer_idx = args.num_hidden_layers
        h = args.hidden_size
        self.enorm = nn.RMSNorm(h, eps=args.rms_norm_eps)
        self.hnorm = nn.RMSNorm(h, eps=args.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        # layer_idx >= first_k_dense_replace, so mlx-lm builds the MoE: same classes as the
        # main model's MoE layers, which is what lets the streamed loader swap its experts.
        layer_cls = _DECODER_LAYERS.get(getattr(args, "model_type", ""), DeepseekV3DecoderLayer)
        self.layer = layer_cls(args, layer_idx=self.layer_idx)
        self.shared_head = SharedHead(args, own_head)

    def __call__(
        self,
        hidden: mx.array,  # [B, T, H] main model's final (normed) hidden states at i
        next_tokens: mx.array,  # [B, T] tokens i+1
        cache: KVCache | None = None,
        embed: nn.Module | None = None,
        head: nn.Module | None = None,
        last: bool = False,  # the last position's outputs only (base.py `_fused_layer`)
    ) -> tuple[mx.array, mx.array]:
        e = self.enorm(embed(next_tokens))  # [B, T, H]
        h = self._fused_layer(e, self.hnorm(hidden), self.eh_proj, cache, last)  # [B, T', H]
        out = self.shared_head.norm(h)
        out_head = self.shared_head.head if "head" in self.shared_head else head
        return out_head(out), h  # [B, T, V], [B, T, H]
