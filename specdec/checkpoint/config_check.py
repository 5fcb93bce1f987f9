"""config.json checked before mlx-lm builds a model from it: one line naming the key and the fix.

    check_config(config, args_class, where)        # types, signs, top-k, quantization section
    check_quantized(config, tensor_names, where)   # weights with scales need a quantization

mlx-lm takes config.json's values as they come (`ModelArgs.from_dict`) and fails deep inside a
layer on a wrong one (`hidden_size: 64.5`, `rope_theta: "abc"`, `num_experts_per_tok: 0`), or
its tokenizer loader reports it as a tokenizer problem. The family's own `ModelArgs` dataclass
says which keys are integers and which floats, so one function covers every family: each key
the family declares is checked against its declared type; sizes and counts must be positive;
the router's top-k must lie in 1..the expert count. Run by every command that builds a model
from config.json (pack, verify, the loader: `specdec.checkpoint.discover.skeleton`).
Try it: `python -c "from specdec.checkpoint.config_check import check_config as c; from mlx_lm.models.deepseek_v3 import ModelArgs as A; c({'hidden_size': -64}, A)"`
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from specdec.core.errors import SpecdecError

# keys every MoE family's model needs given (mlx-lm's defaults are some other model's)
ESSENTIAL = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# the router's top-k and the expert count, by the names the families use
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "moe_k")
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
# integer keys that must be at least 1 (others, e.g. first_k_dense_replace, may be 0)
POSITIVE = (
    *ESSENTIAL,
    *TOP_K_KEYS,
    *EXPERT_KEYS,
    "intermediate_size",
    "moe_intermediate_size",
    "num_key_value_heads",
    "max_position_embeddings",
    "head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "v_head_dim",
    "qk_nope_head_dim",
    "moe_layer_freq",  # divisors of the layer index: 0 is a division by zero in mlx-lm
    "decoder_sparse_step",
)
# float keys that must be above 0
POSITIVE_FLOAT = ("rms_norm_eps", "layer_norm_eps", "norm_eps", "rope_theta")
MAX_DIM = 1 << 31  # MLX shapes are 32-bit


def _bad(where: str, key: str, value: Any, want: str) -> SpecdecError:
    return SpecdecError(
        f"{where}: `{key}` is {value!r}, {want}; restore the config.json of the original model"
    )


def _declared(args_class: type) -> dict[str, tuple[type, Any]]:
    """{key: (int, float or dict, default)} for the family's integer, float and object
    ModelArgs fields."""
    try:
        hints = typing.get_type_hints(args_class)
    except Exception:  # an annotation this Python cannot resolve: check what resolves
        hints = {}
    out = {}
    for f in dataclasses.fields(args_class):
        hint = hints.get(f.name)
        if hint is dict or typing.get_origin(hint) is dict:
            out[f.name] = (dict, f.default)
            continue
        if typing.get_origin(hint) not in (None, typing.Union, types.UnionType):
            continue  # a list, ...: not checked
        kinds = {typing.get_origin(k) or k for k in typing.get_args(hint)} or {hint}
        if dict in kinds and type(None) in kinds and len(kinds) == 2:  # Optional[Dict]
            out[f.name] = (dict, f.default)
            continue
        kind = int if int in kinds and float not in kinds else float if float in kinds else None
        if kind is not None and bool not in kinds:
            out[f.name] = (kind, f.default)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_config(config: dict, args_class: type, where: str = "config.json") -> None:
    """Raise SpecdecError naming the first config.json key mlx-lm could not build a model from;
    args_class: the family's mlx-lm ModelArgs (`discover.model_classes(config)[1]`)."""
    cfg = config.get("text_config", config)
    if not isinstance(cfg, dict):
        raise _bad(where, "text_config", cfg, "not an object")
    declared = _declared(args_class) if dataclasses.is_dataclass(args_class) else {}
    for key in ESSENTIAL:
        if key in declared and key not in cfg:
            raise SpecdecError(
                f"{where}: `{key}` missing (mlx-lm would use another model's default); restore "
                "the config.json of the original model"
            )
    for key, (kind, default) in declared.items():
        if key not in cfg or (cfg[key] is None and key not in (*ESSENTIAL, *POSITIVE_FLOAT)):
            continue  # None: the family's own default (head_dim, q_lora_rank, ...)
        v = cfg[key]
        integral = isinstance(v, float) and v.is_integer() and key not in POSITIVE
        if kind is int and not (_is_int(v) or integral):  # a size must be an int: 64.0 breaks
            raise _bad(where, key, v, "not an integer")
        if kind is float and not (_is_int(v) or isinstance(v, float)):
            raise _bad(where, key, v, "not a number")
        if kind is dict:
            if not isinstance(v, dict):
                raise _bad(where, key, v, "not an object")
            continue
        if key in POSITIVE_FLOAT and not v > 0:
            raise _bad(where, key, v, "but it must be above 0")
        if key in POSITIVE and v < 1:
            raise _bad(where, key, v, "but it must be at least 1")
        if key in POSITIVE and v >= MAX_DIM:
            raise _bad(where, key, v, "but it must be below 2^31 (MLX shapes are 32-bit)")
        if kind is int and v < 0 and not (_is_int(default) and default < 0):
            raise _bad(where, key, v, "but it must not be negative")
    top = next((k for k in TOP_K_KEYS if _is_int(cfg.get(k))), None)
    experts = next((k for k in EXPERT_KEYS if _is_int(cfg.get(k))), None)
    if top and experts and cfg[top] > cfg[experts]:
        raise _bad(where, top, cfg[top], f"above `{experts}` {cfg[experts]} (the router's top-k)")
    _check_quantization(config, where)


def _check_quantization(config: dict, where: str) -> None:
    """mlx-lm's rule: `quantization` {bits, group_size} if present, else a legacy
    `quantization_config` naming its `quant_method`."""
    fix = 'restore it (e.g. "quantization": {"group_size": 64, "bits": 4})'
    q = config.get("quantization")
    if q is not None:
        if not isinstance(q, dict):
            raise SpecdecError(f"{where}: `quantization` is {q!r}, not an object; {fix}")
        for field in ("bits", "group_size"):
            if not (_is_int(q.get(field)) and q[field] > 0):
                raise SpecdecError(
                    f"{where}: `quantization.{field}` is {q.get(field)!r}, not a positive "
                    f"integer; {fix}"
                )
    elif legacy := config.get("quantization_config"):
        if not isinstance(legacy, dict) or "quant_method" not in legacy:
            raise SpecdecError(
                f"{where}: no `quantization` section, and `quantization_config` names no "
                f"quant_method; {fix}"
            )


def check_quantized(config: dict, tensor_names, where: str = "config.json") -> None:
    """Weights stored quantized (a `.scales` tensor) need config.json's quantization section."""
    if config.get("quantization") is None and not config.get("quantization_config"):
        scaled = next((n for n in tensor_names if n.endswith(".scales")), None)
        if scaled is not None:
            raise SpecdecError(
                f"{where}: no `quantization` section, but the weights are quantized ({scaled}); "
                'restore it (e.g. "quantization": {"group_size": 64, "bits": 4})'
            )
