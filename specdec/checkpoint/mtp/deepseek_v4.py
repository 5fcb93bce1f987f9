"""DeepSeek-V4's MTP layout, in MLX, written against antirez/ds4 (ds4.c), the one public engine
that runs V4 Flash's MTP: `mtp_weights_bind` names it, `metal_graph_eval_mtp_draft_from_hc`
and `metal_graph_encode_output_head_mtp` run it, `output_hc_head_one` is its head on one row.

V4 keeps hc_mult hyper-connection (HC) streams per position instead of one residual; the
draft starts from the main model's final streams, before the head mixes them into one row:

    e    = e_proj(enorm(embed(t_{i+1})))                   # [B, T, H], the same for each stream
    x    = e + h_proj(hnorm(S_i))                          # [B, T, hc, H], hnorm per stream
    S'   = Block(x)                                        # HC attention + HC MoE sublayers
    w    = sigmoid(hc_head(rms(flat S')) * scale + base) + hc_eps   # [B, T, hc]
    logits = head(norm(sum_h w_h S'_h))                    # the main model's output head

S_i is the main model's last-layer streams at i (`main_hidden`); S' is fed back for a chained
draft (ds4's `mtp_state_hc`). The block is one V4 decoder layer as ds4 runs it for the MTP:
each sublayer's HC mix (pre, post, comb) is computed from its own input streams
(`hc_pre_from_state_one`), attention is over a raw window of `sliding_window` rows only (ds4's
`mtp_raw_cache`; no compressor, no indexer), its RoPE is the uncompressed layers' (base
`rope_theta`, no YaRN: ds4 runs the block as layer 1), Q is RMS-normed per head after q_b,
the KV row's non-RoPE part goes through E4M3 (64-wide blocks) then f16, attention has per-head
sinks, the output projection is grouped (o_a per group, then o_b), and the MoE routes by
sqrt(softplus) with `e_score_correction_bias` (ds4's `exp_probs_b`) choosing the top k.

The HC math, the router, the clamped SwiGLU experts and the shared expert are mlx-lm's
deepseek_v41 classes (the same formulas as ds4's C; tests/checkpoint/test_mtp_deepseek_v4.py
mirrors the C in numpy). Stored under `model.layers.{num_hidden_layers}.` with mlx-lm's names
for the block (`attn_hc.*`, `self_attn.q_a_proj`, ..., `self_attn.sinks`, `mlp.gate.*`,
`mlp.experts.switch_mlp.*`, `mlp.shared_experts.*`) and `hc_head.{fn,base,scale}`, `e_proj`,
`h_proj`, `enorm`, `hnorm`, `norm` for its own parts (specdec extract-mtp maps ds4's GGUF
names and the HF names onto these).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache
from mlx_lm.models.deepseek_v41 import (
    HyperConnection,
    ModelArgs,
    MoE,
    _apply_rope,
    _collapse,
    _expand,
)
from mlx_lm.models.rope_utils import YarnRoPE
from mlx_lm.models.switch_layers import SwitchLinear

from specdec.checkpoint.mtp.base import MTPBase

KV_FP8_BLOCK = 64  # ds4's dsv4_fp8_kv_quantize_row_inplace_cpu: E4M3 blocks of the non-RoPE part


def kv_round(kv: mx.array, rope_dim: int) -> mx.array:
    """ds4's KV row rounding: the non-RoPE part through E4M3 with a power-of-two scale per 64
    values (amax / 448, at least 1e-4), then the whole row through f16.  [..., D] -> [..., D]"""
    nope = kv[..., : kv.shape[-1] - rope_dim].astype(mx.float32)
    blocks = nope.reshape(*nope.shape[:-1], -1, KV_FP8_BLOCK)
    amax = mx.maximum(mx.max(mx.abs(blocks), axis=-1, keepdims=True), 1e-4)
    scale = mx.power(2.0, mx.ceil(mx.log2(amax / 448.0)))
    q = mx.from_fp8(mx.to_fp8(mx.clip(blocks / scale, -448.0, 448.0)), mx.float32) * scale
    out = mx.concatenate([q.reshape(nope.shape), kv[..., nope.shape[-1] :]], axis=-1)
    return out.astype(mx.float16).astype(kv.dtype)


class WindowAttention(nn.Module):
    """V4's attention as ds4 runs it for the MTP block: one KV head over a raw window."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.num_heads, self.head_dim = args.num_attention_heads, args.head_dim
        self.rope_dim, self.o_groups = args.qk_rope_head_dim, args.o_groups
        self.window, self.eps = args.sliding_window, args.rms_norm_eps
        self.q_a_proj = nn.Linear(args.hidden_size, args.q_lora_rank, bias=False)
        self.q_a_norm = nn.RMSNorm(args.q_lora_rank, eps=args.rms_norm_eps)
        self.q_b_proj = nn.Linear(args.q_lora_rank, self.num_heads * self.head_dim, bias=False)
        self.kv_proj = nn.Linear(args.hidden_size, self.head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(self.head_dim, eps=args.rms_norm_eps)
        self.o_a_proj = SwitchLinear(
            self.num_heads * self.head_dim // self.o_groups,
            args.o_lora_rank,
            self.o_groups,
            bias=False,
        )
        self.o_b_proj = nn.Linear(self.o_groups * args.o_lora_rank, args.hidden_size, bias=False)
        self.sinks = mx.zeros((self.num_heads,), dtype=mx.float32)
        self._group_ids = mx.arange(self.o_groups)[None]
        self.rope = YarnRoPE(dims=self.rope_dim, traditional=True, base=args.rope_theta)

    def __call__(self, x: mx.array, cache: KVCache) -> mx.array:
        b, t, _ = x.shape  # x [B, T, H]
        start = cache.offset
        q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))).reshape(b, t, self.num_heads, -1)
        q = mx.fast.rms_norm(q, None, self.eps)  # ds4's head_rms_norm_inplace
        q = _apply_rope(q, self.rope, rope_dim=self.rope_dim, offset=start)  # [B, T, h, D]
        kv = _apply_rope(
            self.kv_norm(self.kv_proj(x)), self.rope, rope_dim=self.rope_dim, offset=start
        )
        kv = kv_round(kv, self.rope_dim)[:, None]  # [B, 1, T, D]
        keys, _ = cache.update_and_fetch(kv, kv)  # [B, 1, N, D]
        n = keys.shape[2]
        pos = mx.arange(n - t, n)[:, None]  # the queries' rows
        rows = mx.arange(n)[None]
        mask = (rows <= pos) & (rows > pos - self.window)  # [T, N]: ds4's raw window
        keys = keys.astype(mx.float32)
        out = mx.fast.scaled_dot_product_attention(
            q.transpose(0, 2, 1, 3).astype(mx.float32),
            keys,
            keys,
            scale=self.head_dim**-0.5,
            mask=mask,
            sinks=self.sinks.astype(mx.float32),
        )  # [B, h, T, D]
        out = out.transpose(0, 2, 1, 3).astype(x.dtype)
        out = _apply_rope(out, self.rope, rope_dim=self.rope_dim, offset=start, inverse=True)
        out = self.o_a_proj(out.reshape(b * t, self.o_groups, 1, -1), self._group_ids)
        return self.o_b_proj(out.reshape(b, t, -1))  # [B, T, H]


class V4Block(nn.Module):
    """One V4 decoder layer on HC streams, each sublayer's mix from its own input (ds4)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attn_hc = HyperConnection(args)
        self.ffn_hc = HyperConnection(args)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.self_attn = WindowAttention(args)
        self.mlp = MoE(args)

    def __call__(self, streams: mx.array, cache: KVCache, last: bool = False) -> mx.array:
        """last: the last position's streams only; every position still enters the KV cache
        (the attention's), the MoE runs on the last row alone (base.py `_fused_layer`)."""
        pre, post, comb = self.attn_hc(streams)  # streams [B, T, hc, H]
        h = self.self_attn(self.input_layernorm(_collapse(streams, pre)), cache)
        streams = _expand(h, streams, post, comb)
        if last:
            streams = streams[:, -1:]  # [B, 1, hc, H]
        pre, post, comb = self.ffn_hc(streams)
        h = self.mlp(self.post_attention_layernorm(_collapse(streams, pre)))
        return _expand(h, streams, post, comb)  # [B, T, hc, H]


class HCHead(nn.Module):
    """ds4's `hc_head_*` (the main model's `output_hc_*`): one sigmoid weight per stream."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.eps, self.hc_eps = args.rms_norm_eps, args.hc_eps
        self.fn = mx.zeros((args.hc_mult, args.hc_mult * args.hidden_size), dtype=mx.float32)
        self.base = mx.zeros((args.hc_mult,), dtype=mx.float32)
        self.scale = mx.ones((1,), dtype=mx.float32)

    def __call__(self, streams: mx.array) -> mx.array:
        flat = streams.reshape(*streams.shape[:2], -1).astype(mx.float32)  # [B, T, hc*H]
        pre = mx.fast.rms_norm(flat, None, self.eps) @ self.fn.T  # [B, T, hc]
        return _collapse(streams, mx.sigmoid(pre * self.scale + self.base) + self.hc_eps)


class DeepseekV4MTP(MTPBase):
    """One V4 MTP depth: predicts token i+2 from the main streams at i and token i+1."""

    own_parts = ("hc_head.", "e_proj.", "h_proj.", "enorm.", "hnorm.", "norm.")
    own_head_key = "head.weight"  # ds4 uses the main model's output head; never stored
    switch_prefix = "layer.mlp.experts.switch_mlp."

    def __init__(self, args: ModelArgs, own_head: bool = False):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.args = args
        self.layer_idx = args.num_hidden_layers
        self.hc = args.hc_mult
        self.enorm = nn.RMSNorm(h, eps=eps)
        self.hnorm = nn.RMSNorm(h, eps=eps)
        self.e_proj = nn.Linear(h, h, bias=False)
        self.h_proj = nn.Linear(h, h, bias=False)
        self.layer = V4Block(args)
        self.hc_head = HCHead(args)
        self.norm = nn.RMSNorm(h, eps=eps)

    def switch_site(self) -> tuple[nn.Module, str, nn.Module]:
        return self.layer.mlp.experts, "switch_mlp", self.layer.mlp

    @staticmethod
    def main_hidden(model: nn.Module, inputs: mx.array, cache: list) -> tuple[mx.array, mx.array]:
        """(last-layer streams [B, T, hc, H], the normed output [B, T, H]) of mlx-lm's
        deepseek_v41 TextModel: its __call__ without pipeline stages, keeping the streams."""
        from mlx_lm.models.deepseek_v41 import _window_indices

        tm, args = model.model, model.args
        h = tm.embed_tokens(inputs)
        b, t, _ = h.shape
        cache = cache or tm.make_cache()
        previous = 0 if cache[0].window is None else cache[0].window.shape[1]
        window_idx = _window_indices(previous=previous, length=t, window=args.sliding_window)
        window_idx = mx.broadcast_to(window_idx, (b, *window_idx.shape))
        streams = mx.broadcast_to(h[:, :, None, :], (b, t, args.hc_mult, args.hidden_size))
        pre_mix = mx.zeros((b, t, args.hc_mult), dtype=mx.float32)
        pre_mix[..., 0] = 1.0
        start, shared = cache[0].offset, {}
        for layer, c in zip(tm.pipeline_layers, cache, strict=True):
            streams, pre_mix = layer(
                streams, pre_mix, start_pos=start, window_idx=window_idx, cache=c, shared=shared
            )
        return streams, tm.norm(_collapse(streams, pre_mix))

    def __call__(
        self,
        hidden: mx.array,  # [B, T, hc, H] main model's last-layer streams at i
        next_tokens: mx.array,  # [B, T] tokens i+1
        cache: KVCache | None = None,
        embed: nn.Module | None = None,
        head: nn.Module | None = None,
        last: bool = False,  # the last position's outputs only (V4Block's `last`)
    ) -> tuple[mx.array, mx.array]:
        e = self.e_proj(self.enorm(embed(next_tokens)))  # [B, T, H]
        x = e[:, :, None, :] + self.h_proj(self.hnorm(hidden))  # [B, T, hc, H]
        streams = self.layer(x, cache if cache is not None else KVCache(), last)
        out = self.norm(self.hc_head(streams))  # [B, T', H]: T' = 1 with last
        return head(out), streams  # [B, T', V], [B, T', hc, H]
