"""Inputs of one model, checked by shape before they are combined: a trace and a config.json
(`simulate TRACE --gamma auto --config X`), two traces (`probe eviction`: the evaluated trace
and the one its hotlist is profiled on).

    check_trace_config(trace, config, "TRACE", "X/config.json")
    check_traces_agree(evaluated, profile, "--trace runs/t", "the profile trace")

Each raises one line naming both inputs and what differs (experts per layer, top-k, MoE
layers); nothing is simulated on a mix of two models.
"""

from __future__ import annotations

from specdec.checkpoint.config_check import EXPERT_KEYS, TOP_K_KEYS
from specdec.core.errors import SpecdecError
from specdec.trace.format import Trace


def _count(cfg: dict, keys: tuple[str, ...]) -> tuple[str, int] | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return k, v
    return None


def check_trace_config(trace: Trace, config: dict, trace_name: str, config_name: str) -> None:
    """The trace was recorded on the model config.json describes: same experts per layer and
    top-k, and no more MoE layers than the model has layers (its MTP layer included)."""
    cfg = config.get("text_config", config) if isinstance(config, dict) else None
    if not isinstance(cfg, dict):
        raise SpecdecError(f"{config_name}: not a JSON object; give the model's config.json")
    fix = "give the config.json of the model the trace was recorded on"
    for keys, have, what in (
        (EXPERT_KEYS, trace.n_experts, "experts per layer"),
        (TOP_K_KEYS, trace.top_k, "top-k"),
    ):
        found = _count(cfg, keys)
        if found is not None and found[1] != have:
            raise SpecdecError(
                f"{trace_name} has {have} {what} but {config_name} has {found[0]} {found[1]}: {fix}"
            )
    n = cfg.get("num_hidden_layers")
    if isinstance(n, int) and trace.n_layers > n + 1:
        raise SpecdecError(
            f"{trace_name} has {trace.n_layers} MoE layers but {config_name} has "
            f"num_hidden_layers {n}: {fix}"
        )


def check_traces_agree(a: Trace, b: Trace, a_name: str, b_name: str) -> None:
    """Two traces of one model: same MoE layers, experts per layer and top-k."""
    both_ids = a.layer_ids is not None and b.layer_ids is not None
    for what, x, y in (
        ("MoE layers", a.layer_ids, b.layer_ids)
        if both_ids
        else ("MoE layers", a.n_layers, b.n_layers),
        ("experts per layer", a.n_experts, b.n_experts),
        ("top-k", a.top_k, b.top_k),
    ):
        if x != y:
            raise SpecdecError(
                f"{a_name} and {b_name} are traces of different models ({what} {x} vs {y}): "
                "record both on one model"
            )
