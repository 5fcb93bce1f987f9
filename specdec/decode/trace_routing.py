"""Routing from a trace: a real forward whose MoE layers use a trace's experts, not the router's.

    routing = TraceRouting.for_model(load_trace(DIR), sm, seed=0)   # --routing trace:DIR
    sm.streamer.route_override = routing                             # Decode does both

A random checkpoint's router has no locality (consecutive tokens share few experts, popular
experts are not popular for long) and its greedy output soon repeats one token, so its cache
statistics are not a real model's. Driving the same forward by a calibrated trace's routing (the
MiniMax-M2.5 one: `specdec trace synth --like minimax-m2.5`) makes every measured second follow
the question's routing statistics while the model still computes and reads for real: each MoE
layer's router runs and syncs as usual, then its top-k is replaced by the trace's experts at that
position (layer i of the model takes the trace's layer i). The gates applied to them stay the
router's own (the text is not meaningful under given routing; only time, reads and acceptance
are measured).

Positions: the forward's first position is the KV cache's offset; position p takes trace
position p mod T. A verify pass's positions after a rejected draft route as the replay models
rejected drafts (specdec.sim.replay.rejected_routing: each of the previous position's experts
kept with the trace's next-token overlap, the rest drawn by popularity), where the decode knows
the rejection ahead: the oracle drafter says how many of its drafts are right (`planned`).
Other drafters' rejected positions route as the trace's next positions (a wrong token routed as
the right one; replay measured that this flatters wide γ by up to 15% on MiniMax).
"""

from __future__ import annotations

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.sim.replay import rejected_routing, routing_model
from specdec.trace.format import Trace


class TraceRouting:
    """The experts each MoE layer uses at the positions of the forward now running."""

    def __init__(self, trace: Trace, layer_ids: list[int], n_experts: int, top_k: int, seed=0):
        if trace.top_k != top_k or trace.n_experts != n_experts or trace.n_layers < len(layer_ids):
            raise SpecdecError(
                f"the trace routes top-{trace.top_k} of {trace.n_experts} experts over "
                f"{trace.n_layers} layers; the model needs top-{top_k} of {n_experts} over "
                f"{len(layer_ids)}: record or synthesize a trace of this model's shape "
                "(specdec trace synth --like ...)"
            )
        if len(trace.experts) == 0:
            raise SpecdecError("the trace has no positions: record or synthesize a longer one")
        L = len(layer_ids)
        self.experts = np.asarray(trace.experts[:, :L], np.int64)  # [T, L, k]
        self.row = {lid: i for i, lid in enumerate(layer_ids)}
        sub = Trace(self.experts, trace.n_experts, list(trace.expert_bytes)[:L])
        self.rho, self.logp = routing_model(sub)  # [L], [L, E]
        self.rng = np.random.default_rng([seed, 2])
        self.planned: int | None = None  # leading positions of the next forward that are right
        self.pass_rows: np.ndarray = self.experts[:0]  # [n, L, k] of the forward now running

    @classmethod
    def for_model(cls, trace: Trace, sm, seed: int = 0) -> TraceRouting:
        layers = sm.main_moe_layers
        n_experts = int(sm.streamer.index.layers[layers[0]].n_experts)
        return cls(trace, layers, n_experts, sm.top_k, seed)

    def begin(self, start: int, n: int) -> None:
        """The forward about to run covers positions [start, start + n)."""
        T = len(self.experts)
        rows = self.experts[np.arange(start, start + n) % T]  # [n, L, k]
        right, self.planned = self.planned, None
        if right is not None and right < n:  # positions after a rejected draft
            rows = rows.copy()
            for i in range(max(right, 1), n):
                rows[i] = rejected_routing(rows[i - 1][None], self.rho, self.logp, self.rng)[0]
        self.pass_rows = rows

    def __call__(self, layer: int, idx: np.ndarray) -> np.ndarray:
        """The trace's experts for `layer` in the shape of the router's idx [..., n, k]."""
        row = self.row.get(layer)
        if row is None:  # a layer the trace does not route (the MTP layer): the router's own
            return idx
        got = self.pass_rows[:, row]  # [n, k]
        if got.size != idx.size:
            raise SpecdecError(
                f"trace routing: layer {layer} routes {idx.size // idx.shape[-1]} positions, "
                f"the forward began with {len(got)}"
            )
        return got.reshape(idx.shape).astype(idx.dtype)
