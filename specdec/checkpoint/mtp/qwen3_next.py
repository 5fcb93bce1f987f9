"""Qwen3-Next's multi-token-prediction module, in MLX (the layout of the checkpoints' `mtp.*`).

Written against vLLM's `qwen3_next_mtp.py` (Qwen3NextMultiTokenPredictor), depth 1:

    x   = fc(concat([pre_fc_norm_embedding(embed(t_{i+1})), pre_fc_norm_hidden(h_i)]))  # [B,T,H]
    x   = DecoderLayer(x)            # a full-attention layer (never gated delta-net) with its MoE
    out = norm(x)                    # fed back for a chained draft, as vLLM returns it
    logits = head(out)               # the main model's lm_head (or tied embedding)

h_i is the main model's output after its final norm (mlx-lm's `model.model(...)`, which is
what vLLM's Qwen3NextModel returns too). Qwen3-Next's RMSNorms are zero-centred (Gemma style:
x̂·(1 + w)); mlx-lm stores them as plain RMSNorm weights with the 1 added at conversion, and so
does this module — `specdec extract-mtp` adds it to the checkpoint's `mtp.*` norms as mlx-lm's
sanitize does to the main model's.

Stored (mtp.safetensors) under `model.layers.{num_hidden_layers}.`: `fc`, `pre_fc_norm_embedding`,
`pre_fc_norm_hidden`, `norm`, and the decoder layer's names (`self_attn.*`, `mlp.gate`,
`mlp.switch_mlp.*`, `mlp.shared_expert.*`, `mlp.shared_expert_gate`, layer norms).
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache
from mlx_lm.models.qwen3_next import ModelArgs, Qwen3NextDecoderLayer

from specdec.checkpoint.mtp.base import MTPBase


class Qwen3NextMTP(MTPBase):
    """One Qwen3-Next MTP depth: predicts token i+2 from the main hidden state at i and t_{i+1}."""

    own_parts = ("fc.", "pre_fc_norm_embedding.", "pre_fc_norm_hidden.", "norm.")
    own_head_key = "head.weight"  # Qwen3-Next shares lm_head; never stored

    def __init__(self, args: ModelArgs, own_head: bool = False):
        super().__init__()
        self.args = args
        self.layer_idx = args.num_hidden_layers
        h, eps = args.hidden_size, args.rms_norm_eps
        self.pre_fc_norm_embedding = nn.RMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(h, eps=eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        # vLLM builds the layer as `mtp.layers.0` with layer_type="full_attention": its MoE
        # choice is layer 0's (decoder_sparse_step, mlp_only_layers), its attention full.
        # mlx-lm picks attention by (idx + 1) % full_attention_interval, so interval 1.
        full = dataclasses.replace(args, full_attention_interval=1)
        self.layer = Qwen3NextDecoderLayer(full, layer_idx=0)
        self.norm = nn.RMSNorm(h, eps=eps)

    def __call__(
        self,
        hidden: mx.array,  # [B, T, H] main model's final (normed) hidden states at i
        next_tokens: mx.array,  # [B, T] tokens i+1
        cache: KVCache | None = None,
        embed: nn.Module | None = None,
        head: nn.Module | None = None,
        last: bool = False,  # the last position's outputs only (base.py `_fused_layer`)
    ) -> tuple[mx.array, mx.array]:
        e = self.pre_fc_norm_embedding(embed(next_tokens))  # [B, T, H]
        x = self._fused_layer(e, self.pre_fc_norm_hidden(hidden), self.fc, cache, last)
        out = self.norm(x)  # [B, T', H]: T' = 1 with last
        return head(out), out  # [B, T', V], [B, T', H]
