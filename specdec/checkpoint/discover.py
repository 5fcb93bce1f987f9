"""Find the routed experts of any mlx-lm MoE model by module type, not by family name.

Every mlx-lm MoE family computes its routed experts with a switch module of
`mlx_lm.models.switch_layers` (`SwitchGLU`, or `SwitchMLP` for GELU experts) whose projections are
`SwitchLinear` / `QuantizedSwitchLinear` stacks [experts, out, in]. Where the module sits differs
per family (`mlp.switch_mlp`, `mlp.experts`, `feed_forward.experts`, `mixer.switch_mlp`,
`mlp.experts.switch_mlp`, ...), so the streamed loader and `specdec pack` look for the type:

    sites = switch_sites(model)          # {decoder layer: SwitchSite}
    match = expert_matcher(config)       # checkpoint tensor name -> (layer, prefix, proj.kind)

`expert_matcher` builds the family's mlx-lm `Model` from config.json without evaluating a weight
(mlx arrays are lazy) and turns each switch projection's parameter path into a pattern with the
layer number free, so the MTP layer (packed as `model.layers.{num_hidden_layers}.*`, the same
decoder-layer structure) matches too. SwitchLinear outside a switch module (DeepSeek-V4.1's
grouped attention output `o_a_proj`) is not an expert and is left resident.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import mlx.nn as nn
from mlx_lm.models.switch_layers import (
    QuantizedSwitchLinear,
    SwitchGLU,
    SwitchLinear,
    SwitchMLP,
)

from specdec.checkpoint.config_check import check_config
from specdec.core.errors import SpecdecError

SWITCH_TYPES = (SwitchGLU, SwitchMLP)
PROJ_TYPES = (SwitchLinear, QuantizedSwitchLinear)
_KINDS = "weight|scales|biases|bias|global_scale"  # global_scale: pack refuses it (nvfp4)

# tensor name -> (layer, switch module prefix, 'proj.kind'), or None for a resident tensor
Matcher = Callable[[str], tuple[int, str, str] | None]


@dataclass(frozen=True)
class SwitchSite:
    """One decoder layer's routed experts: where the switch module sits and what holds it."""

    layer: int  # index into model.layers
    block_attr: str  # the decoder layer's attribute holding the MoE block ('mlp', 'feed_forward')
    block: nn.Module  # that MoE block: router adapters evaluate its router
    owner: nn.Module  # the module whose attribute `attr` is the switch module
    attr: str  # 'switch_mlp', 'experts', ...
    switch: nn.Module  # SwitchGLU / SwitchMLP
    path: str  # full parameter path: 'model.layers.3.mlp.switch_mlp'
    rel: str  # path inside the decoder layer: 'mlp.switch_mlp'


def projections(switch: nn.Module) -> dict[str, nn.Module]:
    """{attribute: SwitchLinear} of a switch module ('gate_proj', 'up_proj', 'down_proj')."""
    return {k: v for k, v in switch.children().items() if isinstance(v, PROJ_TYPES)}


def is_switch(m: nn.Module) -> bool:
    """A switch module: mlx-lm's, or the streamed one that replaced it (`streams_experts`)."""
    return isinstance(m, SWITCH_TYPES) or getattr(type(m), "streams_experts", False)


def switch_sites(model: nn.Module) -> dict[int, SwitchSite]:
    """{decoder layer index: its SwitchSite}, for the layers that route experts."""
    layers = getattr(model, "layers", None)
    if layers is None:
        raise SpecdecError(
            f"{type(model).__module__}: the model has no `layers` list; specdec streams mlx-lm "
            "decoder models"
        )
    full = {id(m): name for name, m in model.named_modules()}
    sites: dict[int, SwitchSite] = {}
    for i, layer in enumerate(layers):
        found = [(n, m) for n, m in layer.named_modules() if is_switch(m)]
        if not found:
            continue
        if len(found) > 1:
            raise SpecdecError(
                f"decoder layer {i} has {len(found)} switch modules ({[n for n, _ in found]}); "
                "specdec streams one routed-expert module per layer"
            )
        rel, switch = found[0]
        owner_rel, _, attr = rel.rpartition(".")
        owner = layer
        for part in owner_rel.split(".") if owner_rel else ():
            owner = owner[int(part)] if isinstance(owner, list) else getattr(owner, part)
        block_attr = rel.split(".", 1)[0]
        block = getattr(layer, block_attr) if "." in rel else layer
        sites[i] = SwitchSite(i, block_attr, block, owner, attr, switch, full[id(switch)], rel)
    return sites


def model_classes(config: dict) -> tuple[type, type]:
    """(Model, ModelArgs) of config.json's model_type in the installed mlx-lm."""
    from mlx_lm.utils import _get_classes

    if not isinstance(config.get("model_type"), str):
        raise SpecdecError(
            f"config.json has no model_type (got {config.get('model_type')!r}): restore the "
            "config.json of the original model"
        )
    try:
        return _get_classes(config)
    except ValueError:
        raise SpecdecError(
            f"the installed mlx-lm has no model_type {config.get('model_type', '?')!r}: give "
            "a checkpoint mlx-lm loads (`mlx_lm.convert` output), or upgrade mlx-lm"
        ) from None


def skeleton(config: dict, where: str = "config.json") -> nn.Module:
    """The family's mlx-lm Model built from config.json (checked first: config_check.py,
    `where` names it in errors); no weight is ever evaluated."""
    model_class, args_class = model_classes(config)
    check_config(config, args_class, where)
    try:
        return model_class(args_class.from_dict(config))
    except Exception as e:  # a config.json whose fields the family's ModelArgs cannot take
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise SpecdecError(
            f"mlx-lm cannot build {config.get('model_type', '?')!r} from config.json ({first}); "
            "restore the config.json of the original model"
        ) from None


def expert_matcher(config: dict, where: str = "config.json") -> Matcher:
    """Recognise routed-expert tensor names of this config's model (see module doc)."""
    sites = switch_sites(skeleton(config, where))
    if not sites:
        raise SpecdecError(
            f"model_type {config.get('model_type', '?')!r} has no routed experts: mlx-lm builds "
            "it without SwitchGLU/SwitchMLP layers (a dense model?); specdec streams MoE "
            "checkpoints, run a dense one with mlx-lm itself"
        )
    patterns = set()
    for s in sites.values():
        layer_prefix = s.path[: len(s.path) - len(s.rel)]  # 'model.layers.3.'
        head = layer_prefix[: -len(f"{s.layer}.")]  # 'model.layers.'
        projs = "|".join(sorted(projections(s.switch)))
        patterns.add(rf"^{re.escape(head)}(\d+)\.({re.escape(s.rel)})\.({projs})\.({_KINDS})$")
    compiled = [re.compile(p) for p in sorted(patterns)]

    def match(name: str) -> tuple[int, str, str] | None:
        for p in compiled:
            m = p.match(name)
            if m is not None:
                return int(m.group(1)), name.rsplit(".", 2)[0], f"{m.group(3)}.{m.group(4)}"
        return None

    return match
