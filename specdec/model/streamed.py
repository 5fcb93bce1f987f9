"""The streamed MoE block: routed experts come from the expert cache, not from resident memory.

`StreamedSwitchGLU` replaces a family's `switch_mlp` (mlx-lm's `SwitchGLU`). On each call it
reads the router's indices to the host, asks the `Streamer` for the union of the call's experts
(hits stay, misses are read from disk into arena slots), remaps expert ids to slot ids, and runs
mlx-lm's own `SwitchGLU.__call__` with `ArenaLinear` projections that call `mx.gather_(q)mm` on
strided views of the arena. Everything else in the family's block (gate weighting, shared experts)
is the family's own code, so streamed logits equal resident logits.

A call whose union exceeds one cache step (`ExpertCache.max_step`: the slots, or static's
scratch slots) is computed in chunks of positions whose union fits, each chunk evaluated before
the next read can overwrite its slots; so any budget of at least one position's top-k works.
Outputs stay lazy (one host sync per MoE layer, the router's), but every output still pending
is evaluated before a read may overwrite a slot: no lazy graph ever computes on a slot that was
refilled under it.

No sync where no read can be needed: when every expert of a layer is resident (full budget, a
layer pinned whole) and no read is landing, the call remaps ids on the device through the
layer's expert -> slot table (`Streamer.table`) and defers its host part: the cache step,
the recorder call and the step log run from `Streamer.catch_up`, in call order, before any
other cache step and before the log is drained, so stats and records equal the synced path's.
A lookahead whose target layer is wholly resident is skipped: its prefetch would read nothing. A failed read (or lookahead read) makes the cache forget its keys, so no
slot holding a partial or stale block is ever computed on (tests/test_fault_injection.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.switch_layers import SwitchGLU

from specdec.cache.expert_cache import ExpertCache
from specdec.errors import BudgetError, StoreError
from specdec.model.families import Route
from specdec.store.arena import Arena
from specdec.store.layout import ExpertIndex, LayerLayout
from specdec.store.reader import ExpertReader


@dataclass
class LayerStep:
    """One cache step: a MoE layer of one forward call (or one chunk of a wide call)."""

    layer: int
    union: int  # distinct experts selected by the call's positions
    misses: int
    bytes_read: int  # misses and lookahead prefetches started by this step
    phase: str  # "verify", "draft" or "prefill"
    prefetched: int = 0  # blocks this step started reading for a later layer (lookahead)
    synced: bool = True  # False: replayed after the token (device slot tables, no host sync)


@dataclass
class Prefetch:
    """One lookahead batch in flight: its reads and the (cache key, slot) pairs it fills."""

    future: Future
    reqs: list[tuple[int, int]]


@dataclass
class Streamer:
    """Owns the expert path of one loaded model: index, arena, reader, cache and the step log."""

    index: ExpertIndex
    arena: Arena
    reader: ExpertReader
    cache: ExpertCache
    # The main model's last MoE layer: the cache ticks after its step, once per forward.
    last_layer: int
    key_stride: int  # cache key = layer * key_stride + expert
    phase: str = "verify"
    resident_only: bool = False
    log: list[LayerStep] = field(default_factory=list)
    # Optional routing recorder: called with (layer, indices [..., k] int array, phase) per call.
    recorder: Callable[[int, np.ndarray, str], None] | None = None
    # Router lookahead: layer L evaluates the router of the MoE layer `lookahead` MoE layers
    # later on its own input and starts reading the predicted experts (0 = off).
    lookahead: int = 0
    ahead_of: dict[int, tuple[int, nn.Module]] = field(default_factory=dict)  # L -> (L+d, block)
    inflight: dict[int, Prefetch] = field(default_factory=dict)  # slot -> batch still landing
    prefetch_failures: int = 0  # lookahead batches whose read failed (their keys forgotten)
    pending: list[mx.array] = field(default_factory=list)  # lazy outputs computing on slots
    warm: bool = False  # preload reads every routed expert (a budget that holds them all)
    device_tables: bool = True  # False: every call syncs on its router (the reference path)
    # layer -> (cache, cache.version, [n_experts] expert -> slot on the device, or None)
    tables: dict[int, tuple[ExpertCache, int, mx.array | None]] = field(default_factory=dict)
    # calls computed on a device table whose host part is still to run: (layer, indices, phase)
    deferred: list[tuple[int, mx.array, str]] = field(default_factory=list)

    def table(self, layer: int) -> mx.array | None:
        """`layer`'s expert -> slot table on the device while all its experts are resident and
        no read is landing (a call then needs no host read of the router's choice), else None."""
        if self.inflight or not self.device_tables:
            return None
        cache = self.cache
        t = self.tables.get(layer)
        if t is None or t[0] is not cache or t[1] != cache.version:
            slots = cache.block_slots(layer * self.key_stride, self.index.layers[layer].n_experts)
            t = (cache, cache.version, None if slots is None else mx.array(slots))
            self.tables[layer] = t
        return t[2]

    def all_resident(self, layers: list[int]) -> bool:
        """True when a forward over these layers can need no read (nor host sync)."""
        return not self.resident_only and all(self.table(lid) is not None for lid in layers)

    def catch_up(self, n: int | None = None) -> None:
        """Run the host part of the first n deferred calls (None: all), in call order: recorder,
        cache step (all hits: residency has not moved since their tables were built), step log
        and the per-forward tick. Reads their router choices: one small copy each."""
        todo = self.deferred if n is None else self.deferred[:n]
        if not todo:
            return
        self.deferred = self.deferred[len(todo) :]
        saved = self.phase
        try:
            for layer, indices, phase in todo:
                self.phase = phase
                self._replay(layer, np.array(indices))  # [..., k]
        finally:
            self.phase = saved

    def sync(self, indices: mx.array, ahead: mx.array | None) -> np.ndarray:
        """The router's choice on the host; the lookahead router's is evaluated with it (one
        evaluation, the one the layer does anyway)."""
        if ahead is not None:
            mx.eval(indices, ahead)
        return np.array(indices)

    def discard_deferred(self) -> None:
        """Forget deferred calls whose forward is thrown away (a token computed past the end)."""
        self.deferred.clear()

    def _replay(self, layer: int, idx: np.ndarray) -> None:
        """The host part of a deferred call on `idx` [..., k], as the synced path runs it:
        recorder, cache step(s) (chunked as a wide call would be), step log, tick."""
        if self.recorder is not None:
            self.recorder(layer, idx, self.phase)
        experts, counts = union(idx)
        if len(experts) > self.cache.max_step:
            for chunk in position_chunks(idx.reshape(-1, idx.shape[-1]), self.cache.max_step):
                self.fetch(layer, *union(chunk), replay=True)
        else:
            self.fetch(layer, experts, counts, replay=True)
        if layer == self.last_layer:
            self.cache.tick(math.prod(idx.shape[:-1]))

    def _flush(self, keep: mx.array | None = None) -> None:
        """Evaluate every pending output (but `keep`, whose slots the caller protects)."""
        todo = [y for y in self.pending if y is not keep]
        if todo:
            mx.eval(todo)
        self.pending = [keep] if keep is not None and any(y is keep for y in self.pending) else []

    def _requests(self, misses: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        s = self.key_stride
        return [(key // s, key % s, slot) for key, slot in misses]

    def _settle(self, slots, fresh: frozenset[int] = frozenset()) -> None:
        """Wait for reads still landing in these slots (a prefetch hit, or a slot to reuse).

        A lookahead batch that failed is not fatal: its keys still in the slots it was filling
        are forgotten, so they are read again on demand (where a persistent fault raises).
        `fresh`: slots just handed out for new reads, whose old keys must not be forgotten.
        """
        if not self.inflight:
            return
        for slot in slots:
            batch = self.inflight.pop(-1 if slot is None else int(slot), None)
            if batch is None:
                continue
            try:
                self.reader.wait(batch.future)
            except StoreError:
                self.prefetch_failures += 1
                for s in [s for s, b in self.inflight.items() if b is batch]:
                    del self.inflight[s]
                cache = self.cache
                cache.forget(k for k, s in batch.reqs if s not in fresh and cache.slot_of(k) == s)

    def fetch(
        self, layer: int, experts: list[int], counts: list[int], replay: bool = False
    ) -> np.ndarray | None:
        """Slots holding `experts` (sorted, distinct) of `layer`, reading the misses.

        A failed read raises StoreError after its keys are forgotten: no later step can hit a
        slot that holds a partial or stale block. replay: a deferred call's step, all hits.
        """
        base = layer * self.key_stride
        keys = [e + base for e in experts]
        if replay:
            if self.cache.access(keys, counts):
                raise AssertionError("a deferred step missed: residency moved under it")
            self.log.append(LayerStep(layer, len(keys), 0, 0, self.phase, synced=False))
            return None
        if self.inflight:  # lookahead reads into keys about to hit must land (or fail) first
            self._settle(self.cache.slot_of(k) for k in keys)
        misses = self.cache.access(keys, counts)
        if misses:
            fresh = frozenset(slot for _, slot in misses)
            self._settle(fresh, fresh)  # a reused slot may still have an older read landing
            self._flush()
            try:
                self.reader.read(self._requests(misses))
            except StoreError:
                self.cache.forget(key for key, _ in misses)
                raise
        block = self.index.layers[layer].block_bytes
        m = len(misses)
        self.log.append(LayerStep(layer, len(keys), m, m * block, self.phase))
        return self.cache.slots(keys)

    def route_ahead(
        self, layer: int, x: mx.array, table: mx.array | None, route: Route
    ) -> tuple[int, mx.array] | None:
        """(L+d, its router's choice [..., k] on `layer`'s input x), lazy; None when L+d's
        prefetch could read nothing (this layer and L+d wholly resident: no step between)."""
        target, block = self.ahead_of[layer]
        if table is not None and self.table(target) is not None:
            return None
        return target, route(block, x)[0]

    def prefetch(self, layer: int, ahead: mx.array, exclude: np.ndarray, running: mx.array) -> None:
        """Start reading the experts `ahead` [..., k] (evaluated) predicts for `layer` without
        waiting; never evicts `exclude`, the slots of `running` (the current layer's output,
        left computing meanwhile)."""
        base = layer * self.key_stride
        reqs = self.cache.prefetch([e + base for e in union(np.array(ahead))[0]], exclude)
        if not reqs:
            return
        self._flush(keep=running)
        fresh = frozenset(slot for _, slot in reqs)
        self._settle(fresh, fresh)
        batch = Prefetch(self.reader.submit(self._requests(reqs)), reqs)
        for _, slot in reqs:
            self.inflight[slot] = batch
        block = self.index.layers[layer].block_bytes
        self.log.append(LayerStep(layer, 0, 0, len(reqs) * block, self.phase, len(reqs)))

    def resident_slots(self, layer: int, experts: np.ndarray) -> np.ndarray:
        """Slot of each expert id if resident, else -1. Reads nothing, touches nothing."""
        slot_of, base = self.cache.slot_of, layer * self.key_stride
        return np.array([-1 if (s := slot_of(int(e) + base)) is None else s for e in experts])

    def preload(self) -> None:
        """Read the policy's preload set (a seeded hotlist) into an empty cache; warm: then
        every other routed expert too, as mlx-lm loads every weight before decoding."""
        reqs = self.cache.preload()
        if self.warm:
            index = self.index
            keys = [
                lid * self.key_stride + e
                for lid in index.layer_ids
                for e in range(index.layers[lid].n_experts)
            ]
            if len(keys) > self.cache.n_slots:
                raise BudgetError(
                    f"--warm reads all {len(keys)} routed experts but the budget holds "
                    f"{self.cache.n_slots} slots: use --budget 100% (or drop --warm)"
                )
            reqs += self.cache.preload(keys)
        if reqs:
            self.reader.read(self._requests(reqs))

    def drain(self, deferred: int | None = None) -> list[LayerStep]:
        """The steps logged since the last drain (the decode loop calls this once per phase),
        with those of the first `deferred` deferred calls (None: all; the rest belong to a
        later forward already started)."""
        self.catch_up(deferred)
        out, self.log = self.log, []
        return out

    @contextmanager
    def phase_of(self, phase: str, resident_only: bool = False) -> Iterator[None]:
        saved = self.phase, self.resident_only
        self.phase, self.resident_only = phase, resident_only
        try:
            yield
        finally:
            self.phase, self.resident_only = saved


def union(idx: np.ndarray) -> tuple[list[int], list[int]]:
    """Sorted distinct experts of `idx` [..., k] and how many positions chose each."""
    flat = idx.reshape(-1)
    if flat.size == idx.shape[-1]:  # one position: its top-k are distinct (np.unique: ~5x)
        ids = flat.tolist()
        if len(set(ids)) == len(ids):
            return sorted(ids), [1] * len(ids)
    count = np.bincount(flat)
    experts = np.flatnonzero(count)
    return experts.tolist(), count[experts].tolist()


def position_chunks(flat_idx: np.ndarray, width: int) -> list[np.ndarray]:
    """Consecutive groups of positions of `flat_idx` [N, k] whose union holds <= width experts."""
    k = flat_idx.shape[-1]
    if k > width:
        raise BudgetError(
            f"a cache step holds at most {width} experts but one position selects {k}: "
            "raise the budget (or the static policy's scratch)"
        )
    chunks, start = [], 0
    while start < len(flat_idx):
        seen: set[int] = set()
        end = start
        while end < len(flat_idx):
            grown = seen.union(flat_idx[end].tolist())
            if len(grown) > width:
                break
            seen, end = grown, end + 1
        chunks.append(flat_idx[start:end])
        start = end
    return chunks


class _Hidden:
    """Holds objects that must stay out of the module's parameter tree (views, back-references)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class ArenaLinear(nn.Module):
    """One projection of every slot: mlx-lm's (Quantized)SwitchLinear computed on arena views."""

    def __init__(self, arena: Arena, layout: LayerLayout, proj: str):
        super().__init__()
        views = {
            t.name.split(".", 1)[1]: arena.tensor_view(t)
            for t in layout.tensors
            if t.name.split(".", 1)[0] == proj
        }
        self._h = _Hidden(views=views, quant=layout.quant.get(proj))

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False) -> mx.array:
        v, q = self._h.views, self._h.quant
        if q is not None:
            x = mx.gather_qmm(
                x,
                v["weight"],  # [slots, out, in * bits / 32]
                v["scales"],
                v.get("biases"),
                rhs_indices=indices,
                transpose=True,
                group_size=q.group_size,
                bits=q.bits,
                mode=q.mode,
                sorted_indices=sorted_indices,
            )
        else:
            x = mx.gather_mm(
                x,
                v["weight"].swapaxes(-1, -2),  # [slots, in, out]
                rhs_indices=indices,
                sorted_indices=sorted_indices,
            )
        if "bias" in v:
            x = x + mx.expand_dims(v["bias"][indices], -2)
        return x


class StreamedSwitchGLU(nn.Module):
    """Drop-in for mlx-lm's SwitchGLU whose experts live in the streamer's arena."""

    def __init__(
        self,
        streamer: Streamer,
        layer: int,
        original: SwitchGLU,
        block: nn.Module,
        route: Route,
    ):
        super().__init__()
        if not isinstance(original, SwitchGLU):
            raise TypeError(f"layer {layer}: expected SwitchGLU, got {type(original).__name__}")
        layout = streamer.index.layers[layer]
        self.gate_proj = ArenaLinear(streamer.arena, layout, "gate_proj")
        self.up_proj = ArenaLinear(streamer.arena, layout, "up_proj")
        self.down_proj = ArenaLinear(streamer.arena, layout, "down_proj")
        self.activation = original.activation
        self._h = _Hidden(
            streamer=streamer,
            layer=layer,
            block=block,
            route=route,
            lut=np.zeros(layout.n_experts, dtype=np.int32),  # expert id -> slot, this call
        )

    def _glu(self, x: mx.array, slots: mx.array) -> mx.array:
        """mlx-lm's SwitchGLU arithmetic on the arena, with expert ids replaced by slot ids."""
        return SwitchGLU.__call__(self, x, slots)

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        h = self._h
        s: Streamer = h.streamer
        ahead = None
        if not s.resident_only:
            table = s.table(h.layer)
            if s.lookahead and h.layer in s.ahead_of:
                ahead = s.route_ahead(h.layer, x, table, h.route)
            if table is not None and ahead is None:  # no read can be needed: no host sync
                y = self._glu(x, table[indices])  # [..., k, H]
                s.deferred.append((h.layer, indices, s.phase))
                return self._launch(y)
        s.catch_up()  # deferred steps come first: the cache sees calls in order
        idx = s.sync(indices, None if ahead is None else ahead[1])  # [..., k] host sync
        if s.recorder is not None:
            s.recorder(h.layer, idx, s.phase)
        experts, counts = union(idx)
        if s.resident_only:
            y = self._resident_only(x, idx, np.array(experts))
        else:
            if len(experts) <= s.cache.max_step:
                h.lut[experts] = s.fetch(h.layer, experts, counts)
                y = self._glu(x, mx.array(h.lut[idx]))
            else:
                y = self._chunked(x, idx)
            if h.layer == s.last_layer:
                s.cache.tick(math.prod(idx.shape[:-1]))
        self._launch(y)
        if ahead is not None:  # reads overlap this layer's compute and the next layers'
            s.prefetch(ahead[0], ahead[1], np.array(experts) + h.layer * s.key_stride, y)
        return y

    def _launch(self, y: mx.array) -> mx.array:
        """Start computing `y` while Python builds the next layer's graph; track its slots."""
        s = self._h.streamer
        mx.async_eval(y)
        s.pending.append(y)
        if len(s.pending) > 64:  # bound the list; these outputs are long evaluated by now
            s._flush(keep=y)
        if len(s.deferred) > 1024:  # model calls with no drain between (probes, tests)
            s.catch_up()
        return y

    def _chunked(self, x: mx.array, idx: np.ndarray) -> mx.array:
        """A call whose union exceeds one cache step (the slots; static: its scratch slots):
        groups of positions whose union fits."""
        h, s = self._h, self._h.streamer
        flat_idx = idx.reshape(-1, idx.shape[-1])  # [N, k]
        flat_x = x.reshape(-1, x.shape[-1])  # [N, H]
        outs, start = [], 0
        for chunk in position_chunks(flat_idx, s.cache.max_step):
            experts, counts = union(chunk)
            h.lut[experts] = s.fetch(h.layer, experts, counts)
            out = self._glu(flat_x[start : start + len(chunk)], mx.array(h.lut[chunk]))
            s.pending.append(out)  # [n, k, H], evaluated before the next chunk's reads
            outs.append(out)
            start += len(chunk)
        return mx.concatenate(outs, axis=0).reshape(*idx.shape, -1)

    def _resident_only(self, x: mx.array, idx: np.ndarray, experts: np.ndarray) -> mx.array:
        """Cache-only self-draft: drop experts not resident, renormalise the kept gate mass.

        The family multiplies our output by its gate scores; scaling each kept expert's output by
        (sum of all scores) / (sum of kept scores) and zeroing dropped ones turns that into the
        renormalised mixture over resident experts. A position with nothing resident gets only
        the shared expert (if the family has one). The scale stays lazy: no second host sync.
        """
        h = self._h
        h.lut[experts] = h.streamer.resident_slots(h.layer, experts)
        slots = h.lut[idx]  # [..., k], -1 where not resident
        keep = mx.array(slots >= 0)
        _, scores = h.route(h.block, x)  # [..., k], the family's own gate values
        scores = scores.astype(mx.float32)
        kept_mass = (scores * keep).sum(-1, keepdims=True)  # [..., 1]
        scale = mx.where(
            kept_mass > 0, scores.sum(-1, keepdims=True) / mx.maximum(kept_mass, 1e-30), 0.0
        )
        y = self._glu(x, mx.array(np.where(slots >= 0, slots, 0)))  # [..., k, H]
        return (y * (keep * scale)[..., None]).astype(y.dtype)
