"""What every MTP layout shares: its decoder layer, its own KV cache, its stored names.

Each layout (deepseek_v3.py, qwen3_next.py, deepseek_v4.py) subclasses MTPBase; specdec.checkpoint.mtp says which
family uses which.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache


class MTPBase(nn.Module):
    """What every layout shares: its decoder layer at `layer` (index `layer_idx`, the main
    model's layer count), a KV cache of its own, and the stored names."""

    own_parts: tuple[str, ...] = ()  # parameter prefixes outside the decoder layer
    own_head_key = ""  # the parameter that, when stored, replaces the shared head
    switch_prefix = "layer.mlp.switch_mlp."  # the routed experts' parameters (streamed)
    layer_idx: int

    def switch_site(self) -> tuple[nn.Module, str, nn.Module]:
        """(owner, attribute, MoE block) of the routed experts the streamed loader swaps."""
        return self.layer.mlp, "switch_mlp", self.layer.mlp

    @staticmethod
    def main_hidden(model: nn.Module, inputs: mx.array, cache: list) -> tuple[mx.array, mx.array]:
        """(the state the module starts from, the normed output the head takes) of one main
        forward: both mlx-lm's `model.model(...)` here; DeepSeek-V4 starts from its streams."""
        out = model.model(inputs, cache)  # [B, T, H]
        return out, out

    def make_cache(self) -> KVCache:
        """A trimmable KV cache for the module's attention (one per decode stream)."""
        return KVCache()

    def checkpoint_weights(self) -> dict[str, mx.array]:
        """Parameters under their stored names (`model.layers.{N}.*`)."""
        prefix = f"model.layers.{self.layer_idx}."
        return {
            prefix + name.removeprefix("layer."): v for name, v in tree_flatten(self.parameters())
        }

    def _fused_layer(
        self,
        e: mx.array,  # [B, T, H] normed embedding of tokens i+1
        h: mx.array,  # [B, T, H] normed main hidden state at i
        proj: nn.Module,  # [2H] -> [H]
        cache: KVCache | None,
        last: bool = False,
    ) -> mx.array:
        """The decoder layer's output on proj(concat([e, h])): the step every layout shares.

        last: the output at the last position only ([B, 1, H]). Every position still enters
        the KV cache, which takes the attention's input alone; the MoE runs on the last row,
        so a catch-up over T committed positions reads one position's experts, not T's. The
        layer's steps are mlx-lm's (DeepSeek-V3's, GLM-4.5's and Qwen3-Next's full-attention
        decoder layers alike: pre-norm attention, then pre-norm MLP, each added back)."""
        x = proj(mx.concatenate([e, h], axis=-1))  # [B, T, H]
        mask = create_attention_mask(x, cache, return_array=True)
        if not last:
            return self.layer(x, mask, cache)  # [B, T, H]
        layer = self.layer
        h = (x + layer.self_attn(layer.input_layernorm(x), mask, cache))[:, -1:]  # [B, 1, H]
        return h + layer.mlp(layer.post_attention_layernorm(h))  # [B, 1, H]
