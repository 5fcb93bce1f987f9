"""Mixed-precision experts: compute on two pools, and the resident model to check them against.

A mixed pack (`specdec pack --cold-bits 2 --hotlist FILE`) stores a layer's hot experts at
their own precision and the rest requantized (store/requantize.py); the loader gives each
precision its own arena, reader and cache (store/pools.py, cache/pooled.py).

`MixedExperts` computes one MoE call on both arenas: the slots a call's experts occupy are
numbered hot first, then cold, so `slots >= n_hot` marks the cold (position, expert) pairs.
It runs mlx-lm's SwitchGLU arithmetic once per precision over all pairs (the other precision's
pairs pointed at slot 0 and discarded) and keeps, per pair, the output of the precision its
block has: `mx.where`, on the device, so device slot tables (no host sync) still work. The cost:
a layer holding both precisions computes its routed experts twice.

`resident_mixed(packed)` is the reference: mlx-lm's model from the packed directory, each MoE
block's switch module replaced by a pair of mlx-lm SwitchGLUs (one quantized like the hot blocks,
one at the cold bits) holding every expert's weights as packed, which selects per pair the same
way. Streamed == resident bit for bit (tests/pack/test_mixed_precision.py).
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.switch_layers import SwitchGLU
from mlx_lm.utils import load_model

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.pooled import PooledCache
from specdec.checkpoint.discover import switch_sites
from specdec.store.layout import EXPERTS_BIN, ExpertIndex, LayerLayout
from specdec.store.pools import PoolPlan, members
from specdec.store.safetensors import mx_dtype


def select(cold: mx.array, hot_fn, cold_fn, hot_idx: mx.array, cold_idx: mx.array) -> mx.array:
    """Per (position, expert) pair the output of its block's precision. cold: [..., k] bool."""
    return mx.where(cold[..., None], cold_fn(cold_idx), hot_fn(hot_idx))  # [..., k, H]


class MixedExperts:
    """One layer's experts in two arenas: hot slots 0..n_hot-1, cold slots from n_hot."""

    def __init__(self, hot, cold, n_hot: int) -> None:
        self.hot, self.cold, self.n_hot = hot, cold, n_hot  # per-arena experts

    def __call__(self, x: mx.array, slots: mx.array) -> mx.array:
        h = self.n_hot
        return select(
            slots >= h,
            lambda i: self.hot(x, i),
            lambda i: self.cold(x, i),
            mx.minimum(slots, h - 1),
            mx.maximum(slots - h, 0),
        )


def on_pools(hot, cold, n_hot: int):
    """A layer's experts computing on slot ids over both arenas; hot/cold None: that precision
    is absent from the layer, decided here once rather than on every call."""
    if cold is None:
        return hot
    if hot is None:
        return lambda x, slots: cold(x, mx.maximum(slots - n_hot, 0))
    return MixedExperts(hot, cold, n_hot)


def pooled_cache(
    make, plan: PoolPlan, options: dict, key_stride: int, index: ExpertIndex
) -> PooledCache:
    """An empty PooledCache; `make(n_slots, options)` builds one pool's ExpertCache. A hotlist
    in `options` seeds each pool with its own experts."""
    n_keys = (max(index.layer_ids) + 1) * key_stride
    is_cold = np.zeros(n_keys, dtype=bool)
    for lid, ly in index.layers.items():
        is_cold[lid * key_stride : lid * key_stride + ly.n_experts] = members(ly, cold=True)
    pools: list[ExpertCache] = []
    for cold, p in ((False, plan.hot), (True, plan.cold)):
        opts = dict(options)
        if opts.get("hotlist"):
            opts["hotlist"] = [
                (lay, e) for lay, e in opts["hotlist"] if is_cold[lay * key_stride + e] == cold
            ]
        pools.append(make(p.n_slots, opts))
    return PooledCache(*pools, is_cold, (plan.hot.n_experts, plan.cold.n_experts))


# ----------------------------------------------------------------------------- reference


class ResidentMixed(nn.Module):
    """A MoE block's experts, resident: mlx-lm SwitchGLUs per precision, selected per pair."""

    def __init__(self, hot: SwitchGLU, cold: SwitchGLU, is_cold: np.ndarray) -> None:
        super().__init__()
        self.hot, self.cold = hot, cold
        self._is_cold = mx.array(is_cold)  # [E] bool; underscore: not a parameter

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        return select(
            self._is_cold[indices],
            lambda i: self.hot(x, i),
            lambda i: self.cold(x, i),
            indices,
            indices,
        )


def _stacked(ly: LayerLayout, blocks: np.ndarray, member: np.ndarray) -> list[tuple[str, mx.array]]:
    """Every tensor of `ly` stacked over the experts [E, ...]; zeros where not a member."""
    out = []
    for t in ly.tensors:
        raw = np.zeros((ly.n_experts, t.nbytes), dtype=np.uint8)
        for e in np.flatnonzero(member):
            start = int(ly.offsets[e]) + t.offset
            raw[e] = blocks[start : start + t.nbytes]
        out.append((t.name, mx.array(raw).view(mx_dtype(t.dtype)).reshape(ly.n_experts, *t.shape)))
    return out


def _glu(original: SwitchGLU, ly: LayerLayout, blocks: np.ndarray, member: np.ndarray) -> SwitchGLU:
    """A SwitchGLU shaped like `original`, quantized as `ly` says, holding the members' blocks."""
    E, hidden, dims = original.gate_proj.weight.shape
    bias = any(t.name.endswith(".bias") for t in ly.tensors)
    glu = SwitchGLU(dims, hidden, E, activation=original.activation, bias=bias)
    q = next(iter(ly.quant.values()))
    if q is not None:
        nn.quantize(glu, group_size=q.group_size, bits=q.bits, mode=q.mode)
    glu.load_weights(_stacked(ly, blocks, member), strict=True)
    return glu


def resident_mixed(packed: str | Path) -> nn.Module:
    """mlx-lm's model of a mixed pack with every routed expert resident (the main layers)."""
    packed = Path(packed)
    index = ExpertIndex.load(packed)
    model, _ = load_model(packed, lazy=True, strict=False)
    blocks_file = np.memmap(packed / EXPERTS_BIN, dtype=np.uint8, mode="r")
    for lid, site in switch_sites(model).items():
        ly, orig = index.layers[lid], site.switch
        cold = ly.is_cold if ly.cold is not None else np.zeros(ly.n_experts, dtype=bool)
        setattr(
            site.owner,
            site.attr,
            ResidentMixed(
                _glu(orig, ly, blocks_file, ~cold),
                _glu(orig, ly.cold or ly, blocks_file, cold),
                cold,
            ),
        )
    mx.eval(model.parameters())
    return model
