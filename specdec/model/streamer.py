"""The expert path of one loaded model: the `Streamer` the streamed MoE blocks share.

It owns the index, arena, reader and cache, runs one cache step per MoE call (reads of the
misses, lookahead prefetches, pending outputs settled before a slot is refilled), keeps the
step log that decode drains per phase, and the device slot tables of wholly resident layers.
`specdec.model.streamed` holds the MoE block that calls it; the module docstring there says
how a call flows.
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

from specdec.cache.expert_cache import ExpertCache
from specdec.errors import BudgetError, StoreError
from specdec.model.families import Route
from specdec.store.arena import Arena
from specdec.store.layout import ExpertIndex
from specdec.store.reader import ExpertReader


@dataclass
class LayerStep:
    """One cache step: a MoE layer of one forward call (or one chunk of a wide call)."""

    layer: int
    union: int  # distinct experts selected by the call's positions
    misses: int
    bytes_read: int  # misses and lookahead prefetches started by this step
    phase: str  # "verify", "draft", "prefill" or "rollback" (decode/rollback.py)
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
    # MoE layers whose every expert preload reads (--warm; the budget must hold them all):
    # the layers this model streams, so an MTP layer not loaded is not read
    warm: tuple[int, ...] = ()
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
                for _ in self.steps(layer, np.array(indices), replay=True):  # [..., k]
                    pass
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

    def steps(
        self, layer: int, idx: np.ndarray, replay: bool = False
    ) -> Iterator[tuple[np.ndarray, list[int], np.ndarray | None]]:
        """The host part of a call on `idx` [..., k], shared by the synced and deferred paths:
        the recorder, then its cache step, yielded as (idx, experts, slots); or, when its union
        exceeds a step, one per group of positions whose union fits, yielded as (positions
        [n, k], experts, slots) before the next may read; then the per-forward tick."""
        if self.recorder is not None:
            self.recorder(layer, idx, self.phase)
        experts, counts = union(idx)
        if len(experts) <= self.cache.max_step:
            yield idx, experts, self.fetch(layer, experts, counts, replay)
        else:
            for chunk in position_chunks(idx.reshape(-1, idx.shape[-1]), self.cache.max_step):
                part, n = union(chunk)
                yield chunk, part, self.fetch(layer, part, n, replay)
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

    def prefetch(self, layer: int, ahead: mx.array, exclude: list[int], running: mx.array) -> None:
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

    def resident_slots(self, layer: int, experts: list[int]) -> np.ndarray:
        """Slot of each expert id if resident, else -1. Reads nothing, touches nothing."""
        slot_of, base = self.cache.slot_of, layer * self.key_stride
        return np.array([-1 if (s := slot_of(e + base)) is None else s for e in experts])

    def preload(self) -> None:
        """Read the policy's preload set (a seeded hotlist) into an empty cache; warm: then
        every other routed expert too, as mlx-lm loads every weight before decoding."""
        reqs = self.cache.preload()
        if self.warm:
            index = self.index
            keys = [
                lid * self.key_stride + e
                for lid in self.warm
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
