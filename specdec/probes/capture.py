"""Capture what each MoE block of a running model sees: its input, its routing, and lookahead.

    with MoETap(sm.model, sm.family, distances=(1, 2, 3), keep_inputs=True) as tap:
        sm.model(mx.array([tokens]))
    tap.calls[0].route[lid]          # (indices [T, k], gates [T, k]) of MoE layer lid
    tap.calls[0].lookahead[(d, lid)] # MoE layer lid's router on the input of the MoE layer
                                     # d MoE layers before it

Every MoE decoder layer's block (the attribute holding its switch module: specdec.checkpoint.discover)
is wrapped for the duration of the `with` and records; the family needs a router adapter. Distances count MoE layers, as the runtime's `--lookahead`, the simulator and
docs/trace-format.md do (dense layers are not in a trace): d = 1 is the previous MoE layer. At
each MoE layer's call the family's own `route` (specdec.checkpoint.families) is evaluated on the same
array the block receives, so the recorded gates belong to exactly the experts the block selects,
and router lookahead costs nothing extra in the model itself. One `CallCapture` per forward call
(a prefill or a decode step), in call order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from specdec.checkpoint.discover import switch_sites
from specdec.checkpoint.families import Family


@dataclass
class CallCapture:
    """One forward call: per MoE layer its routing, lookahead predictions and (optionally) input."""

    n_positions: int
    route: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # [T, k] x2
    lookahead: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # [T, k]
    inputs: dict[int, np.ndarray] = field(default_factory=dict)  # [T, H] float32


class _Tap(nn.Module):
    """Stands in for one decoder layer's MLP: records, then calls the real block unchanged."""

    def __init__(self, block: nn.Module, layer: int, owner: MoETap):
        super().__init__()
        self.block = block
        self._meta = (layer, owner)  # a tuple, so it stays out of the module's parameter tree

    def __call__(self, x: mx.array) -> mx.array:
        layer, owner = self._meta
        owner._see(layer, x)
        return self.block(x)


class MoETap:
    """Context manager wrapping every decoder layer's MLP of an mlx-lm model (see module doc)."""

    def __init__(
        self,
        model: nn.Module,
        family: Family,
        distances: tuple[int, ...] = (),
        keep_inputs: bool = False,
    ):
        self.model, self.family = model, family
        self.route = family.require_route("trace recording")
        self.layers = model.layers
        self.sites = switch_sites(model)
        self.blocks = {lid: site.block for lid, site in self.sites.items()}
        self._moe_ids = sorted(self.blocks)
        self._moe_order = {lid: i for i, lid in enumerate(self._moe_ids)}
        self.distances, self.keep_inputs = tuple(distances), keep_inputs
        self.calls: list[CallCapture] = []
        self._saved: list[tuple[nn.Module, str, nn.Module]] = []
        self._last_layer = -1  # a layer id not above the last one seen starts a new call

    def __enter__(self) -> MoETap:
        self._last_layer = -1
        for i, site in self.sites.items():
            layer = self.layers[i]
            self._saved.append((layer, site.block_attr, site.block))
            setattr(layer, site.block_attr, _Tap(site.block, i, self))
        return self

    def __exit__(self, *exc) -> None:
        for layer, attr, block in self._saved:
            setattr(layer, attr, block)
        self._saved.clear()

    def _see(self, layer: int, x: mx.array) -> None:
        flat = x.reshape(-1, x.shape[-1])  # [T, H]
        if not self.calls or layer <= self._last_layer:
            self.calls.append(CallCapture(flat.shape[0]))
        self._last_layer = layer
        call = self.calls[-1]
        route = self.route
        if layer in self.blocks:
            inds, scores = route(self.blocks[layer], x)
            call.route[layer] = (
                np.array(inds).reshape(flat.shape[0], -1),
                np.array(scores.astype(mx.float32)).reshape(flat.shape[0], -1),
            )
            if self.keep_inputs:
                call.inputs[layer] = np.array(flat.astype(mx.float32))
        order = self._moe_order
        for d in self.distances:
            at = order.get(layer)
            target = self._moe_ids[at + d] if at is not None and at + d < len(order) else None
            if target is not None:
                inds, _ = route(self.blocks[target], x)
                call.lookahead[(d, target)] = np.array(inds).reshape(flat.shape[0], -1)
