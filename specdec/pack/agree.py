"""A packed directory's index agrees with its config.json: the layers and expert shapes that
mlx-lm builds from config.json are the ones experts.json packs.

    check_layers(packed, moe_layers, n_main, index)      # which layers, MTP layer included
    check_experts(packed, layer, switch_module, index)   # count and matrix shapes of one layer
    check_against_config(packed, config, index)          # both, from config.json alone

The loader (stream/loader.py) runs them on the model it built; `specdec verify` builds the
family's skeleton from config.json (no weight evaluated) and runs the same checks.
"""

from __future__ import annotations

from pathlib import Path

import mlx.nn as nn
from mlx_lm.models.switch_layers import QuantizedSwitchLinear

from specdec.checkpoint.discover import skeleton, switch_sites
from specdec.core.errors import SpecdecError
from specdec.store.layout import MTP_FILE, ExpertIndex


def check_against_config(packed: Path, config: dict, index: ExpertIndex) -> None:
    """config.json's model has the packed MoE layers, with the packed expert shapes."""
    model = skeleton(config, f"{packed}/config.json")
    sites = switch_sites(model)
    check_layers(packed, sorted(sites), len(model.layers), index)
    for lid, site in sites.items():
        check_experts(packed, lid, site.switch, index)


def check_layers(packed: Path, moe: list[int], n_main: int, index: ExpertIndex) -> None:
    """config.json's MoE layers (and MTP layer, packed as layer n_main) must be the packed ones.

    An edited num_hidden_layers would otherwise run another model: fewer layers take the last
    main MoE layer for the MTP layer; more find the MTP layer's experts at a main layer.
    """
    if moe != [lid for lid in index.layer_ids if lid < n_main]:
        raise SpecdecError(
            f"{packed}: config.json has MoE layers {moe} but experts.json packs "
            f"{index.layer_ids}; re-pack the model (specdec pack MODEL_DIR OUT_DIR --force)"
        )
    extra = [lid for lid in index.layer_ids if lid >= n_main]
    mtp = (packed / MTP_FILE).exists()
    if extra == [n_main] and not mtp and MTP_FILE in index.resident:
        raise SpecdecError(
            f"{packed}/{MTP_FILE} missing (experts.json packs the MTP layer {n_main} and records "
            "the file); re-pack with `specdec pack --force`"
        )
    if extra != ([n_main] if mtp else []):
        raise SpecdecError(
            f"{packed}: config.json has num_hidden_layers {n_main} but experts.json packs "
            f"layers {index.layer_ids} (an MTP layer is packed as layer num_hidden_layers); "
            "restore the config.json the model was packed with, or re-pack it"
        )


def check_experts(packed: Path, layer: int, original: nn.Module, index: ExpertIndex) -> None:
    """config.json must describe the experts experts.json packed: count and matrix shapes.

    `original` is the family's switch module that mlx-lm built from config.json, never evaluated.
    A config edited after packing (expert count, MoE width, hidden size) would otherwise compute
    garbage or fail deep inside a matmul.
    """
    layout = index.layers[layer]
    for proj in layout.projections:
        spec, q = layout.tensor(f"{proj}.weight"), layout.quant.get(proj)
        out_dim, cols = spec.shape
        module = getattr(original, proj, None)
        # mlx-lm quantizes a switch projection at load only where config.json names its path
        # (mixed-precision recipes); else it is dense [E, out, in] and the packed one may not be
        as_built = isinstance(module, QuantizedSwitchLinear) or q is None
        in_dim = cols if as_built else cols * 32 // q.bits  # packed uint32 columns
        want = [layout.n_experts, out_dim, in_dim]
        weight = getattr(module, "weight", None)
        got = None if weight is None else list(weight.shape)
        if got != want:
            raise SpecdecError(
                f"{packed}: config.json does not match experts.json: layer {layer} {proj} is "
                f"{got} [experts, out, in] by config.json but {want} packed; restore the "
                "config.json the model was packed with, or re-pack (specdec pack MODEL_DIR "
                "OUT_DIR --force)"
            )
