"""Model presets for `specdec trace synth --like NAME`, and targets files for other models.

    from specdec.trace.presets import PRESETS, load_targets
    preset = PRESETS["minimax-m2.5"]        # shape, measured targets, fitted parameters
    shape, targets = load_targets("t.json", like=None)

expert_bytes is one routed expert as MLX stores it for streaming: affine 4-bit, group size 64,
bf16 scale and bias per group, i.e. 3·hidden·moe_intermediate·(1/2 + 4/64) bytes. The seed
question's MiniMax cache mixed 4-bit hot and 2-bit cold experts; here every expert is 4-bit, so
its 9 GB is 1130 slots of 7,962,624 B (docs/trace-synth.md).

Only minimax-m2.5 has measured routing statistics (the seed question's); its parameters come
from `specdec trace fit --like minimax-m2.5` (seed 0) and are stored here, so synthesis never
fits. The other presets are "shape only": their layers, experts, top-k and expert size are the
models', their routing parameters MiniMax's. Refit them with `specdec trace fit --like NAME
--targets FILE` once their statistics are measured.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from specdec.checkpoint.presets import routed_shape
from specdec.core.errors import SpecdecError
from specdec.core.inputs import check_input_file
from specdec.core.units import parse_budget
from specdec.trace.synthetic import SynthParams, Targets, TraceShape


def mlx_4bit_expert_bytes(hidden: int, intermediate: int) -> int:
    """Gate, up and down of one expert, 4-bit with a bf16 scale and bias per 64 weights."""
    weights = 3 * hidden * intermediate
    return weights // 2 + weights // 64 * 4


@dataclass(frozen=True)
class Preset:
    shape: TraceShape
    params: SynthParams
    targets: Targets | None  # None: shape only
    budget: str | None  # the targets' budget as written (e.g. "9GB")
    source: str


MINIMAX_TARGETS = Targets(
    overlap=0.33,
    union={2: 13.42, 3: 17.99, 8: 35.01},
    budget_slots=1130,
    lru=0.53,
    static=0.45,
    positions=2000,
)
# specdec trace fit --like minimax-m2.5 --seed 0
MINIMAX_PARAMS = SynthParams(skew=0.9168, reuse=0.1181, history=0.2769, window=3.0)

_BORROWED = "MiniMax-M2.5's routing parameters"


def _shape(model: str) -> TraceShape:
    """A preset model's trace shape, from the same dimensions `make-random --like` builds."""
    layers, experts, top_k, hidden, inter = routed_shape(model)
    ids = tuple(layers) if layers[0] else None  # dense-first models keep their layer ids
    return TraceShape(len(layers), experts, top_k, mlx_4bit_expert_bytes(hidden, inter), ids)


PRESETS: dict[str, Preset] = {
    "minimax-m2.5": Preset(
        _shape("minimax-m2.5"),
        MINIMAX_PARAMS,
        MINIMAX_TARGETS,
        "9GB",
        "seed question: MiniMax-M2.5 on a 24 GB M4 (LRU and static bound at 9 GB, unions over "
        "64 decode tokens)",
    ),
    **{
        name: Preset(_shape(name), MINIMAX_PARAMS, None, None, f"shape only: {label}, " + _BORROWED)
        for name, label in [
            ("deepseek-v3", "DeepSeek-V3 (layers 0-2 dense)"),
            ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
            ("mixtral-8x7b", "Mixtral-8x7B"),
        ]
    },
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise SpecdecError(f"unknown preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[name]


def load_targets(path: str | os.PathLike, like: str | None = None) -> tuple[TraceShape, Targets]:
    """Read a targets JSON file (format in specdec.sim.fit); its shape, or the preset's."""
    p = Path(path)
    try:
        check_input_file(p, "targets file")
        raw = json.loads(p.read_text())
    except OSError as err:
        raise SpecdecError(f"{p}: cannot read targets ({err.strerror}): check the path") from None
    except json.JSONDecodeError as err:
        raise SpecdecError(f"{p}: invalid JSON ({err}): fix the targets file") from None
    if not isinstance(raw, dict):
        raise SpecdecError(f"{p}: targets must be a JSON object: see docs/trace-synth.md")
    try:
        return _parse_targets(raw, like)
    except (TypeError, ValueError, KeyError, AttributeError) as err:  # e.g. union a list
        raise SpecdecError(f"{p}: bad targets ({err}): see docs/trace-synth.md") from None


# fields of `specdec trace stats --json` that are not targets: its output is a targets file
_STATS_ONLY = {
    "phase",
    "overlap_per_layer",
    "top10_share",
    "entropy",
    "budget_slots",
    "trace_positions",
}


def _parse_targets(raw: dict, like: str | None) -> tuple[TraceShape, Targets]:
    known = {"shape", "overlap", "union", "budget", "lru", "static", "positions", "model"}
    extra = sorted(set(raw) - known - _STATS_ONLY)
    if extra:
        raise ValueError(f"unknown field {extra[0]!r}; fields are {', '.join(sorted(known))}")
    if "shape" in raw:
        s = raw["shape"]
        shape = TraceShape(
            int(s["n_layers"]), int(s["n_experts"]), int(s["top_k"]), int(s["expert_bytes"])
        )
        if min(shape.n_layers, shape.n_experts, shape.top_k, shape.expert_bytes) < 1:
            raise ValueError("shape fields must be positive")
        if shape.top_k > shape.n_experts:
            raise ValueError("top_k exceeds n_experts")
    elif like is not None:
        shape = get_preset(like).shape
    else:
        raise ValueError("no shape: add a shape object or pass --like PRESET")
    k, n = shape.top_k, shape.n_experts

    def rate(name: str) -> float | None:
        v = raw.get(name)
        if v is None:
            return None
        v = float(v)
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"{name} {v} is not a fraction in [0, 1]")
        return v

    union = {}
    for g, u in (raw.get("union") or {}).items():
        if u is None:  # `trace stats` found no window of g positions
            continue
        g, u = int(g), float(u)
        if g < 1 or not (k <= u <= min(g * k, n)) or not math.isfinite(u):
            raise ValueError(f"union at gamma {g} must lie in [{k}, {min(g * k, n)}], got {u}")
        if g > 1:
            union[g] = u
    budget_slots = None
    if raw.get("budget") is not None:
        budget_slots = parse_budget(str(raw["budget"])).to_slots(shape.expert_bytes)
        if budget_slots < k:
            raise ValueError(f"budget {raw['budget']} holds {budget_slots} slots, below top_k {k}")
    lru, static = rate("lru"), rate("static")
    if (lru is not None or static is not None) and budget_slots is None:
        raise ValueError("lru and static need the budget they were measured at")
    positions = int(raw.get("positions", 2000))
    if positions < 2:
        raise ValueError(f"positions {positions}: need at least 2")
    targets = Targets(rate("overlap"), union, budget_slots, lru, static, positions)
    if targets.overlap is None and not union and lru is None and static is None:
        raise ValueError("no statistic to fit: give overlap, union, lru or static")
    return shape, targets
