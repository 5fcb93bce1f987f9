"""Multi-token-prediction (MTP) modules, in MLX, loadable from checkpoint weights; which layout
each model family uses (`mtp_class`).

Layouts: DeepSeek-V3's (`MTPModule`, here; also GLM-4.5's, `glm4_moe`, whose checkpoints store
the same names at the same place with GLM's own decoder layer) and Qwen3-Next's
(`specdec.checkpoint.mtp_qwen3_next`). Every layout stores its weights in `mtp.safetensors` under
`model.layers.{num_hidden_layers}.` (the decoder layer's names directly under it), so pack, the
loader and the drafter treat them alike; `specdec extract-mtp` renames a checkpoint's layout.

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
streamed loader swaps `mtp.layer.mlp.switch_mlp`. mlx-lm's loader refuses unknown keys in
`model*.safetensors`, so our checkpoints keep these weights in `mtp.safetensors` next to them.

Use: `mtp = load_mtp(model_dir, model)`; `logits, h = mtp(hidden, next_tokens, cache=c,
embed=model.model.embed_tokens, head=model.lm_head)`; chain drafts by feeding `h` back.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import glm4_moe
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache
from mlx_lm.models.deepseek_v3 import DeepseekV3DecoderLayer, ModelArgs

from specdec.core.errors import SpecdecError
from specdec.core.files import write_atomic
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import write_safetensors

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


class MTPBase(nn.Module):
    """What every layout shares: its decoder layer at `layer` (index `layer_idx`, the main
    model's layer count), a KV cache of its own, and the stored names."""

    own_parts: tuple[str, ...] = ()  # parameter prefixes outside the decoder layer
    own_head_key = ""  # the parameter that, when stored, replaces the shared head
    layer_idx: int

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
    ) -> mx.array:
        """The decoder layer's output on proj(concat([e, h])): the step every layout shares."""
        x = proj(mx.concatenate([e, h], axis=-1))  # [B, T, H]
        mask = create_attention_mask(x, cache, return_array=True)
        return self.layer(x, mask, cache)  # [B, T, H]


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
    ) -> tuple[mx.array, mx.array]:
        e = self.enorm(embed(next_tokens))  # [B, T, H]
        h = self._fused_layer(e, self.hnorm(hidden), self.eh_proj, cache)  # [B, T, H]
        out = self.shared_head.norm(h)
        out_head = self.shared_head.head if "head" in self.shared_head else head
        return out_head(out), h  # [B, T, V], [B, T, H]


def mtp_class(model_type: str) -> type[nn.Module] | None:
    """The MTP module class of a model family, None for a family without one."""
    if model_type in _DECODER_LAYERS:
        return MTPModule
    if model_type == "qwen3_next":
        from specdec.checkpoint.mtp_qwen3_next import Qwen3NextMTP

        return Qwen3NextMTP
    return None


def target_io(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The main model's token embedding and output head, which every MTP layout shares."""
    embed = model.model.embed_tokens
    return embed, (model.lm_head if "lm_head" in model else embed.as_linear)


def _module_name(key: str, prefix: str, own_parts: tuple[str, ...]) -> str:
    """`model.layers.N.self_attn.x` -> `layer.self_attn.x`; `model.layers.N.enorm.w` -> `enorm.w`."""
    rest = key[len(prefix) :]
    return rest if rest.startswith(own_parts) else "layer." + rest


def _quant_params(path: str, module: nn.Module, weights: dict[str, mx.array]) -> dict | bool:
    """Per-layer (group_size, bits) inferred from the stored packed shapes, or False."""
    if not hasattr(module, "to_quantized") or f"{path}.scales" not in weights:
        return False
    in_dims = module.weight.shape[-1]
    bits = weights[f"{path}.weight"].shape[-1] * 32 // in_dims
    group_size = in_dims // weights[f"{path}.scales"].shape[-1]
    return {"group_size": group_size, "bits": bits}


def load_mtp(
    model_dir_or_weights: str | Path | dict[str, mx.array],
    model: nn.Module,
    with_experts: bool = True,
):
    """Build the MTP module for `model` (an mlx-lm Model of a family `mtp_class` knows).

    `model_dir_or_weights` is a model directory (reads `mtp.safetensors`, returns None when the
    directory has none) or a dict keyed by full checkpoint names (keys of other layers are
    ignored). Quantized layers (those with `.scales`) are quantized to match before loading.
    with_experts=False: a packed directory, whose routed experts live in experts.bin; the
    caller swaps `mtp.layer.mlp.switch_mlp` for a streamed one (its placeholder weights are
    lazy and never evaluated).
    """
    args = model.args
    cls = mtp_class(getattr(args, "model_type", ""))
    if cls is None:
        return None
    prefix = f"model.layers.{args.num_hidden_layers}."
    if isinstance(model_dir_or_weights, dict):
        raw = model_dir_or_weights
    else:
        path = Path(model_dir_or_weights) / MTP_FILE
        if not path.exists():
            return None
        raw = mx.load(str(path))
    # DeepSeek-V3's HF checkpoint also stores `embed_tokens` under the MTP prefix: a copy of
    # the main embedding, which this module takes from the main model instead.
    weights = {
        _module_name(k, prefix, cls.own_parts): v
        for k, v in raw.items()
        if k.startswith(prefix) and not k.startswith(prefix + "embed_tokens.")
    }
    if not weights:
        return None
    mtp = cls(args, own_head=cls.own_head_key in weights)
    if any(k.endswith(".scales") for k in weights):
        nn.quantize(mtp, class_predicate=lambda p, m: _quant_params(p, m, weights))
    missing = {k for k, _ in tree_flatten(mtp.parameters())} - set(weights)
    if not with_experts:
        missing = {k for k in missing if not k.startswith("layer.mlp.switch_mlp.")}
    if missing:
        raise SpecdecError(
            f"MTP weights under {prefix}* lack {sorted(missing)[:3]}...: "
            "re-export the checkpoint's MTP layer with `specdec extract-mtp`"
        )
    mtp.load_weights(list(weights.items()), strict=with_experts)
    mtp.eval()
    return mtp


def save_with_mtp(out: Path, model: nn.Module, mtp: nn.Module, config: dict) -> None:
    """Write an mlx-lm model directory: model.safetensors, mtp.safetensors and config.json, each
    under a temporary name first, so a killed export never leaves a half-written file."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    files = {
        "model.safetensors": dict(tree_flatten(model.parameters())),
        MTP_FILE: mtp.checkpoint_weights(),
    }
    for name, weights in files.items():
        write_safetensors(out / name, weights)
    write_atomic(out / "config.json", json.dumps(config, indent=2) + "\n")


def quantize_with_mtp(model: nn.Module, mtp: nn.Module, config: dict, group_size: int, bits: int):
    """Quantize a model and its MTP module as `mlx_lm.convert -q` does (affine, every layer
    whose input width the group divides); returns (model, config with `quantization`)."""
    from mlx_lm.utils import quantize_model

    model, config = quantize_model(model, config, group_size, bits)
    config["quantization_config"] = config["quantization"]
    quantize_mtp(mtp, group_size, bits)
    return model, config


def quantize_mtp(mtp: nn.Module, group_size: int, bits: int) -> None:
    """Quantize the MTP module in place as `mlx_lm.convert -q` quantizes a model (affine): a
    layer whose input width the group does not divide stays in float (mlx_lm.utils
    quantize_model's predicate); load_mtp quantizes exactly the layers stored with scales."""
    nn.quantize(
        mtp,
        group_size=group_size,
        bits=bits,
        class_predicate=lambda _, m: (
            hasattr(m, "to_quantized") and m.weight.shape[-1] % group_size == 0
        ),
    )
