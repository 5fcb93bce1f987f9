"""Model shapes for the device compute model: weight bytes and FLOPs per layer, from config.json.

    shape = ModelShape.from_config(json.load(open("packed/config.json")))
    shape.layer_cost(layer=3, positions=4, union=13, context=512)  # -> Cost(bytes, flops)

Counted per forward of T positions (the roofline's two axes, see `specdec.clock.roofline`):

- attention projections of every layer (multi-head latent attention when the config has
  `kv_lora_rank`, else grouped-query attention with `head_dim` or hidden / heads), plus the
  KV cache read (context × per-token KV bytes, 16-bit) and its FLOPs (4 · T · context · heads ·
  head dim: scores and values);
- the dense MLP of dense layers (`first_k_dense_replace`, `mlp_only_layers`), the shared expert
  and the router of MoE layers;
- routed experts: every expert in the pass's *union* is read once (bytes), each position
  multiplies through its own top-k (FLOPs: 2 · T · k · expert params);
- the LM head (vocab × hidden) once per forward.

Weights are stored at the config's `quantization` bits with a 16-bit scale and bias per group
(mlx affine: bits/8 + 4/group_size bytes per parameter), else at `torch_dtype`. Norms, biases and
the embedding row gather are left out (under 0.1% of the bytes for every shape here). A packed
model's measured expert block size (experts.json) replaces the computed one when given.
Tests: `pytest tests/clock/test_clock_model.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specdec.core.errors import SpecdecError

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
KV_BYTES = 2.0  # KV cache entries in 16-bit, as mlx-lm keeps them for a 16-bit model


@dataclass(frozen=True)
class Cost:
    bytes: float | np.ndarray  # or [n] parts' alike but for their unions (moe_mlp_cost's)
    flops: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.bytes + other.bytes, self.flops + other.flops)


@dataclass(frozen=True)
class ModelShape:
    """Per-layer parameter counts of one decoder stack; see the module docstring for what counts."""

    n_layers: int
    hidden: int
    vocab: int
    n_experts: int
    top_k: int
    expert_params: int  # one routed expert: gate, up and down projections
    attn_params: int  # one layer's attention projections
    kv_per_token: int  # KV cache elements per token per layer
    attn_dot: (
        int  # heads × (score head dim + value head dim): attention FLOPs per context token / 2
    )
    dense_mlp_params: int  # the MLP of a dense layer
    shared_params: int  # shared expert(s) of a MoE layer
    bytes_per_param: float
    moe_layers: frozenset[int] = field(default_factory=frozenset)
    expert_block_bytes: float = 0.0  # one routed expert on disk/in memory

    @classmethod
    def from_config(
        cls,
        cfg: dict,
        moe_layers: list[int] | None = None,
        expert_block_bytes: float | None = None,
    ) -> ModelShape:
        """The shape of an mlx-lm config.json; `moe_layers` and `expert_block_bytes` from a packed
        index (experts.json) override what the config implies."""
        cfg = cfg.get("text_config", cfg)  # multimodal wrappers keep the decoder's shape there
        try:
            hidden, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
            heads = int(cfg["num_attention_heads"])
            vocab = int(cfg["vocab_size"])
        except (KeyError, TypeError, ValueError) as e:
            raise SpecdecError(f"config.json lacks {e} needed for the device model") from e
        n_experts = int(
            cfg.get("n_routed_experts")
            or cfg.get("num_local_experts")
            or cfg.get("num_experts")
            or 0
        )
        top_k = int(cfg.get("num_experts_per_tok") or 0)
        inter = int(cfg.get("intermediate_size") or 0)
        moe_inter = int(cfg.get("moe_intermediate_size") or inter)
        if cfg.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V3 family)
            nope, rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
            v_dim, kv_rank = int(cfg["v_head_dim"]), int(cfg["kv_lora_rank"])
            q_rank = cfg.get("q_lora_rank")
            q = (
                hidden * q_rank + q_rank * heads * (nope + rope)
                if q_rank
                else hidden * heads * (nope + rope)
            )
            attn = q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim)
            attn += heads * v_dim * hidden
            kv_per_token, attn_dot = kv_rank + rope, heads * (nope + rope + v_dim)
        else:
            head_dim = int(cfg.get("head_dim") or hidden // heads)
            kv_heads = int(cfg.get("num_key_value_heads") or heads)
            attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
            kv_per_token, attn_dot = 2 * kv_heads * head_dim, 2 * heads * head_dim
        shared = int(cfg.get("n_shared_experts") or 0) * 3 * hidden * moe_inter
        shared += (
            3
            * hidden
            * int(
                cfg.get("shared_expert_intermediate_size")
                or cfg.get("shared_intermediate_size")
                or 0
            )
        )
        if moe_layers is None:
            dense = set(range(int(cfg.get("first_k_dense_replace") or 0)))
            dense |= set(cfg.get("mlp_only_layers") or [])
            moe_layers = [i for i in range(n_layers) if i not in dense] if n_experts else []
        quant = cfg.get("quantization") or cfg.get("quantization_config")
        if quant:
            bpp = int(quant["bits"]) / 8 + 4 / int(quant["group_size"])
        else:
            bpp = DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2.0)
        expert_params = 3 * hidden * moe_inter
        return cls(
            n_layers=n_layers,
            hidden=hidden,
            vocab=vocab,
            n_experts=n_experts,
            top_k=top_k,
            expert_params=expert_params,
            attn_params=attn,
            kv_per_token=kv_per_token,
            attn_dot=attn_dot,
            dense_mlp_params=3 * hidden * inter,
            shared_params=shared,
            bytes_per_param=bpp,
            moe_layers=frozenset(moe_layers),
            expert_block_bytes=expert_block_bytes or expert_params * bpp,
        )

    def attention_cost(self, positions: int, context: int) -> Cost:
        """One layer's attention for `positions` new tokens over `context` cached ones."""
        kv_len = context + positions
        return Cost(
            bytes=self.attn_params * self.bytes_per_param + kv_len * self.kv_per_token * KV_BYTES,
            flops=2 * positions * self.attn_params + 2 * positions * kv_len * self.attn_dot,
        )

    def mlp_cost(self, layer: int, positions: int, union: int) -> Cost:
        """One layer's MLP: dense, or router + shared expert + the `union` routed experts."""
        if layer not in self.moe_layers:
            return self.dense_mlp_cost(positions)
        return self.moe_mlp_cost(positions, union)

    def dense_mlp_cost(self, positions: int) -> Cost:
        p = self.dense_mlp_params
        return Cost(p * self.bytes_per_param, 2 * positions * p)

    def moe_mlp_cost(self, positions: int, union):
        """A MoE layer's MLP: router + shared expert + the `union` routed experts (an [n] array of
        unions gives [n] bytes: one layer's cost per element)."""
        fixed = self.shared_params + self.hidden * self.n_experts  # shared expert(s), router
        return Cost(
            bytes=fixed * self.bytes_per_param + union * self.expert_block_bytes,
            flops=2 * positions * (fixed + self.top_k * self.expert_params),
        )

    def head_cost(self, positions: int) -> Cost:
        p = self.vocab * self.hidden
        return Cost(p * self.bytes_per_param, 2 * positions * p)
