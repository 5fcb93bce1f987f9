"""The `tiny` DeepSeek-V3 MoE + MTP module in PyTorch, numerically mirroring mlx-lm's deepseek_v3.

Imported by training/train_tiny_torch.py (training, CUDA or CPU), training/
export_tiny_torch.py and training/check_tiny_torch_parity.py; not run on its own. Needs only
torch (the GPU machine has no MLX).

Mirrors, op for op, mlx_lm/models/deepseek_v3.py (mlx-lm 0.32.2):
  * RMSNorm x·rsqrt(mean(x²)+eps)·w; kv_a_layernorm has eps 1e-6 fixed, like mlx-lm;
  * MLA without q LoRA, trained NON-absorbed: kv_b_proj [H·(nope+v), kv_lora] is exported as is
    and mlx-lm's `Model.sanitize` splits it into `embed_q` / `unembed_out`;
  * RoPE over the qk_rope dims with `traditional=True` (adjacent pairs (2i, 2i+1) rotate by
    pos·θ^(-2i/d)), shared single-head k_pe; softmax scale (nope+rope)^-0.5;
  * router: sigmoid(x·Wᵀ) in float32; `e_score_correction_bias` is added for the top-k
    selection only; the selected *unbiased* scores are normalised over the k and scaled by
    routed_scaling_factor (noaux_tc, n_group 1);
  * SwiGLU experts down(silu(gate(x))·up(x)), plus the shared expert, first layer dense;
  * MTP (specdec/checkpoint/mtp/): h' = eh_proj([enorm(embed(t_{i+1})), hnorm(h_i)]), a full
    decoder layer with its own MoE, shared_head.norm, the main lm_head; h_i is taken after the
    main model's final norm.
Routed experts are stored stacked ([N, I, H] like mlx-lm's SwitchGLU) and computed densely:
every expert runs on every token and unselected ones get gate weight 0, which is exact
(value and gradients) and, at this size, faster on a GPU than gathering.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 512  # dense first layer
    moe_intermediate_size: int = 128
    num_hidden_layers: int = 5
    num_attention_heads: int = 4
    n_shared_experts: int = 1
    n_routed_experts: int = 32
    num_experts_per_tok: int = 4
    routed_scaling_factor: float = 2.5
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    first_k_dense_replace: int = 1
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    def hf_config(self) -> dict:
        """config.json fields of the HF/mlx-lm deepseek_v3 layout (before quantization)."""
        c = asdict(self)
        c.update(
            model_type="deepseek_v3",
            architectures=["DeepseekV3ForCausalLM"],
            num_key_value_heads=self.num_attention_heads,
            q_lora_rank=None,
            topk_method="noaux_tc",
            scoring_func="sigmoid",
            norm_topk_prob=True,
            n_group=1,
            topk_group=1,
            moe_layer_freq=1,
            max_position_embeddings=4096,
            attention_bias=False,
            tie_word_embeddings=False,
            torch_dtype="float32",
            eos_token_id=0,
            bos_token_id=None,
        )
        return c


class RMSNorm(nn.Module):
    def __init__(self, dims: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dims))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * self.weight.float()).to(x.dtype)


def rope_traditional(x: torch.Tensor, theta: float) -> torch.Tensor:
    """mlx `nn.RoPE(d, traditional=True)` at offset 0: rotate pairs (x[2i], x[2i+1])."""
    *_, length, d = x.shape  # x [B, heads, L, d]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)  # [d/2]
    ang = torch.arange(length, device=x.device, dtype=torch.float32)[:, None] * inv  # [L, d/2]
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]  # [B, h, L, d/2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)  # [B, h, L, d/2, 2]
    return out.flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: TinyConfig):
        super().__init__()
        self.c = c
        h, qd = c.num_attention_heads, c.qk_nope_head_dim + c.qk_rope_head_dim
        self.q_proj = nn.Linear(c.hidden_size, h * qd, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(
            c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim, bias=False
        )
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, 1e-6)
        self.kv_b_proj = nn.Linear(
            c.kv_lora_rank, h * (c.qk_nope_head_dim + c.v_head_dim), bias=False
        )
        self.o_proj = nn.Linear(h * c.v_head_dim, c.hidden_size, bias=False)
        self.scale = qd**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, (b, length, _) = self.c, x.shape
        h, nope, rope = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim
        q = self.q_proj(x).view(b, length, h, nope + rope).transpose(1, 2)  # [B, h, L, 48]
        q_nope, q_pe = q.split([nope, rope], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, rope], dim=-1)
        k_pe = rope_traditional(k_pe[:, None], c.rope_theta)  # [B, 1, L, rope]
        q_pe = rope_traditional(q_pe, c.rope_theta)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent))  # [B, L, h·(nope+v)]
        kv = kv.view(b, length, h, nope + c.v_head_dim).transpose(1, 2)
        k_nope, v = kv.split([nope, c.v_head_dim], dim=-1)  # [B, h, L, ·]
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, h, -1, -1)], dim=-1)  # [B, h, L, 48]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.o_proj(out.transpose(1, 2).reshape(b, length, h * c.v_head_dim))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    """noaux_tc sigmoid router; keeps the last selection counts for the balance update."""

    def __init__(self, c: TinyConfig):
        super().__init__()
        self.c = c
        self.weight = nn.Parameter(torch.empty(c.n_routed_experts, c.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(c.n_routed_experts))
        self.last_load: torch.Tensor | None = None  # [N] selections in the last forward
        self.last_inds: torch.Tensor | None = None  # [T, k] the last forward's choices
        self.last_logits: torch.Tensor | None = None  # [T, N] float32

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.c
        with torch.autocast(x.device.type, enabled=False):  # the router stays float32
            logits = x.float() @ self.weight.float().T  # [T, N]
        self.last_logits = logits  # kept (with grad) for the routing-smoothness term
        scores = torch.sigmoid(logits)
        inds = torch.topk((scores + self.e_score_correction_bias).detach(), c.num_experts_per_tok)[
            1
        ]
        w = scores.gather(-1, inds)  # [T, k] unbiased scores of the chosen experts
        w = w / w.sum(-1, keepdim=True) * c.routed_scaling_factor
        self.last_inds = inds
        self.last_load = torch.bincount(inds.flatten(), minlength=c.n_routed_experts).detach()
        return inds, w


class Experts(nn.Module):
    """Stacked SwiGLU experts, mlx SwitchGLU layout: gate/up [N, I, H], down [N, H, I]."""

    def __init__(self, c: TinyConfig):
        super().__init__()
        n, i, h = c.n_routed_experts, c.moe_intermediate_size, c.hidden_size
        self.gate_proj = nn.Parameter(torch.empty(n, i, h))
        self.up_proj = nn.Parameter(torch.empty(n, i, h))
        self.down_proj = nn.Parameter(torch.empty(n, h, i))

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        n, i, h = self.gate_proj.shape  # x [T, H], weights [T, N] (0 where unselected)
        g = x @ self.gate_proj.reshape(n * i, h).T  # [T, N·I]
        u = x @ self.up_proj.reshape(n * i, h).T  # [T, N·I]
        a = (F.silu(g) * u).view(-1, n, i) * weights[..., None].to(x.dtype)  # [T, N, I]
        return a.reshape(-1, n * i) @ self.down_proj.permute(0, 2, 1).reshape(n * i, h)


class MoE(nn.Module):
    def __init__(self, c: TinyConfig):
        super().__init__()
        self.gate = Gate(c)
        self.experts = Experts(c)
        self.shared_experts = MLP(c.hidden_size, c.moe_intermediate_size * c.n_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # [T, H]
        inds, w = self.gate(flat)  # [T, k]
        dense = torch.zeros(flat.shape[0], self.gate.c.n_routed_experts, device=x.device)
        dense = dense.scatter(-1, inds, w)  # [T, N]
        y = self.experts(flat, dense) + self.shared_experts(flat)
        return y.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, c: TinyConfig, layer_idx: int, dropout: float = 0.0):
        super().__init__()
        self.self_attn = Attention(c)
        moe = layer_idx >= c.first_k_dense_replace
        self.mlp = MoE(c) if moe else MLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.drop = nn.Dropout(dropout)  # training-only regulariser, identity in eval

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.drop(self.self_attn(self.input_layernorm(x)))
        return h + self.drop(self.mlp(self.post_attention_layernorm(h)))


class Backbone(nn.Module):
    def __init__(self, c: TinyConfig, dropout: float):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            [DecoderLayer(c, i, dropout) for i in range(c.num_hidden_layers)]
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)  # [B, T, H] after the final norm


class SharedHead(nn.Module):
    def __init__(self, c: TinyConfig):
        super().__init__()
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class MTP(nn.Module):
    def __init__(self, c: TinyConfig, dropout: float):
        super().__init__()
        self.enorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.hnorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.layer = DecoderLayer(c, c.num_hidden_layers, dropout)
        self.shared_head = SharedHead(c)

    def forward(self, hidden: torch.Tensor, next_emb: torch.Tensor) -> torch.Tensor:
        h = self.eh_proj(torch.cat([self.enorm(next_emb), self.hnorm(hidden)], dim=-1))
        return self.shared_head.norm(self.layer(h))  # [B, T, H]


class TinyMTP(nn.Module):
    """Main model (`model.*`, `lm_head`) and its depth-1 MTP module (`mtp.*`)."""

    def __init__(self, c: TinyConfig, dropout: float = 0.0):
        super().__init__()
        self.c = c
        self.model = Backbone(c, dropout)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.mtp = MTP(c, dropout)

    def init_weights(self, seed: int, std: float = 0.02) -> None:
        """GPT-2-style init: N(0, std), residual outputs scaled by 1/sqrt(2·layers), norms 1."""
        g = torch.Generator().manual_seed(seed)
        out_std = std / math.sqrt(2 * (self.c.num_hidden_layers + 1))
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
                continue
            s = (
                out_std
                if name.endswith(("o_proj.weight", "down_proj.weight", "down_proj"))
                else std
            )
            if name.endswith("gate.weight"):
                s = self.c.hidden_size**-0.5  # spread router logits so routing starts informative
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * s)

    def gates(self) -> list[Gate]:
        return [m for m in self.modules() if isinstance(m, Gate)]

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of the main model at x and of the MTP given the next tokens y: [B, T, V] each."""
        hidden = self.model(x)  # [B, T, H]
        logits = self.lm_head(hidden)
        logits2 = self.lm_head(self.mtp(hidden, self.model.embed_tokens(y)))
        return logits, logits2

    def losses(self, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(main CE on t_{i+1}, MTP CE on t_{i+2}, routing smoothness, router z) for [B, T+2]."""
        x, y, z = tokens[:, :-2], tokens[:, 1:-1], tokens[:, 2:]  # [B, T] each
        logits, logits2 = self(x, y)
        v = self.c.vocab_size
        main = F.cross_entropy(logits.float().reshape(-1, v), y.reshape(-1))
        mtp = F.cross_entropy(logits2.float().reshape(-1, v), z.reshape(-1))
        return main, mtp, self.routing_smoothness(x.shape), self.router_z()

    def router_z(self) -> torch.Tensor:
        """Mean squared router logit over MoE layers (training-only, weight --router-z).

        Keeps the sigmoid out of float32 saturation (sigmoid(z) == 1.0 for z > ~17): saturated
        experts tie on score + bias, and torch and MLX break top-k ties differently.
        """
        return torch.stack([g.last_logits.pow(2).mean() for g in self.gates()]).mean()

    def routing_smoothness(self, shape: torch.Size) -> torch.Tensor:
        """Mean over MoE layers of 1 − cos(z_t, z_{t−1}), z = doubly centred router logits.

        A training-only term (weight --smooth, 0 = off) that asks adjacent tokens for similar
        router preferences, i.e. temporal locality of expert choice. Scale-invariant, so it
        cannot be met by shrinking the logits; each expert's mean over the batch is removed
        first, so it cannot be met by one expert that every token picks either (seen without
        that centring: max/mean load 8 = one expert in every top-k).
        """
        terms = []
        for g in self.gates():
            zl = g.last_logits.view(*shape, -1)  # [B, T, N]
            zl = zl - zl.mean((0, 1), keepdim=True)  # per-expert component shared by all tokens
            zl = zl - zl.mean(-1, keepdim=True)
            terms.append(1 - F.cosine_similarity(zl[:, 1:], zl[:, :-1], dim=-1).mean())
        return torch.stack(terms).mean()


def _hf_name(name: str, n_layers: int) -> str:
    """torch parameter name -> HF DeepSeek-V3 name (experts keep their stacked `...experts.P`)."""
    if name.startswith("mtp."):
        rest = name.removeprefix("mtp.").removeprefix("layer.")
        return f"model.layers.{n_layers}.{rest}"
    return name


def hf_state_dict(model: TinyMTP) -> dict[str, torch.Tensor]:
    """float32 weights under DeepSeek-V3's HF checkpoint names; the MTP at model.layers.{N}."""
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        t, name = t.detach().float().cpu(), _hf_name(name, model.c.num_hidden_layers)
        if ".mlp.experts." in name:
            prefix, proj = name.rsplit(".", 1)  # ...mlp.experts, gate_proj
            for e in range(t.shape[0]):
                out[f"{prefix}.{e}.{proj}.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


def load_hf_state_dict(model: TinyMTP, hf: dict[str, torch.Tensor]) -> None:
    """Inverse of hf_state_dict: load HF-named weights into `model` (strict)."""
    state = {}
    for name, t in model.state_dict().items():
        hname = _hf_name(name, model.c.num_hidden_layers)
        if ".mlp.experts." in hname:
            prefix, proj = hname.rsplit(".", 1)
            parts = [hf[f"{prefix}.{e}.{proj}.weight"] for e in range(t.shape[0])]
            state[name] = torch.stack([torch.as_tensor(p) for p in parts])
        else:
            state[name] = torch.as_tensor(hf[hname])
    model.load_state_dict(state, strict=True)
