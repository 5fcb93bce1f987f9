"""Multi-token-prediction (MTP) modules, in MLX, loadable from checkpoint weights; which layout
each model family uses (`mtp_class`, from the family's row in specdec.checkpoint.families).

Layouts, one file each: DeepSeek-V3's (`deepseek_v3.py`: `MTPModule`; also GLM-4.5's),
Qwen3-Next's (`qwen3_next.py`) and DeepSeek-V4's (`deepseek_v4.py`, from antirez/ds4; run on
mlx-lm's deepseek_v41); what they share is `base.py`. Every layout stores its weights in
`mtp.safetensors` under `model.layers.{num_hidden_layers}.` (the decoder layer's names directly
under it), so pack, the loader and the drafter treat them alike; `specdec extract-mtp` renames a
checkpoint's layout. mlx-lm's loader refuses unknown keys in `model*.safetensors`, so our
checkpoints keep these weights in `mtp.safetensors` next to them.

Use: `mtp = load_mtp(model_dir, model)`; `logits, h = mtp(hidden, next_tokens, cache=c,
embed=model.model.embed_tokens, head=model.lm_head)`; chain drafts by feeding `h` back.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from specdec.checkpoint.families import get_family
from specdec.checkpoint.mtp.base import MTPBase
from specdec.checkpoint.mtp.deepseek_v3 import MTPModule
from specdec.checkpoint.mtp.deepseek_v4 import DeepseekV4MTP
from specdec.checkpoint.mtp.qwen3_next import Qwen3NextMTP
from specdec.core.errors import SpecdecError
from specdec.core.files import write_atomic
from specdec.store.layout import MTP_FILE
from specdec.store.safetensors import write_safetensors

LAYOUTS: dict[str, type[MTPBase]] = {
    "deepseek_v3": MTPModule,
    "qwen3_next": Qwen3NextMTP,
    "deepseek_v4": DeepseekV4MTP,
}
__all__ = [
    "LAYOUTS",
    "DeepseekV4MTP",
    "MTPBase",
    "MTPModule",
    "Qwen3NextMTP",
    "load_mtp",
    "mtp_class",
]


def mtp_class(model_type: str) -> type[MTPBase] | None:
    """The MTP module class of a model family, None for a family without one."""
    return LAYOUTS.get(get_family(model_type).mtp)


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
        missing = {k for k in missing if not k.startswith(cls.switch_prefix)}
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
