"""The expert source of one loaded model: which slot holds an expert, reading the ones that miss.

    src = ExpertSource(index, arena, reader, cache, key_stride)
    slots, missed = src.fetch(layer, experts, counts)   # reads the misses: [n] slots, ids
    src.prefetch(layer, experts, at, using, running)    # lookahead: reads started, not awaited

It owns the index, arena, reader and cache, and keeps slots safe to reuse: the lazy outputs still
computing on slots (`pending`) are evaluated, and the reads still landing in them (`inflight`,
lookahead batches) awaited, before a slot is refilled or hit. It also keeps the device-side
expert -> slot table of each wholly resident layer (a call on it needs no host sync).
It knows nothing of phases, the step log or decoding (`specdec.stream.streamer` does).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from specdec.cache.expert_cache import ExpertCache, Ordered
from specdec.core.accelerator import on_cuda
from specdec.core.errors import BudgetError, StoreError
from specdec.store.arena import Arena
from specdec.store.layout import ExpertIndex
from specdec.store.reader import ExpertReader


@dataclass
class Prefetch:
    """One lookahead batch in flight: its reads and the (cache key, slot) pairs it fills."""

    future: Future
    reqs: list[tuple[int, int]]


@dataclass(frozen=True)
class SlotTable:
    """Where a wholly resident layer's experts sit. `slots` [n_experts] expert -> slot, on the
    device; `first`: where expert e sits in slot first + e (as --warm loads a layer), the slot
    of expert 0, so a call can compute on that window of the arena with the router's own ids
    and build the graph mlx-lm builds (no gather of slots); else None."""

    slots: mx.array
    first: int | None


@dataclass
class ExpertSource:
    """Index, arena, reader and cache of one model, and the state that keeps its slots safe."""

    index: ExpertIndex
    arena: Arena
    reader: ExpertReader
    cache: ExpertCache
    key_stride: int  # cache key = layer * key_stride + expert
    inflight: dict[int, Prefetch] = field(default_factory=dict)  # slot -> batch still landing
    prefetch_failures: int = 0  # lookahead batches whose read failed (their keys forgotten)
    pending: list[mx.array] = field(default_factory=list)  # lazy outputs computing on slots
    device_tables: bool = True  # False: every call syncs on its router (the reference path)
    # the plan holds every streamed expert (SlotPlan/PoolPlan.holds_all): no slot is ever
    # refilled, so outputs computing on slots need neither tracking nor an early start
    holds_all: bool = False
    # layer -> (cache, cache.version, its SlotTable or None)
    tables: dict[int, tuple[ExpertCache, int, SlotTable | None]] = field(default_factory=dict)

    def table(self, layer: int) -> SlotTable | None:
        """`layer`'s expert -> slot table while all its experts are resident and no read is
        landing (a call then needs no host read of the router's choice), else None."""
        if self.inflight or not self.device_tables:
            return None
        cache = self.cache
        t = self.tables.get(layer)
        if t is None or t[0] is not cache or t[1] != cache.version:
            slots = cache.block_slots(layer * self.key_stride, self.index.layers[layer].n_experts)
            t = (
                cache,
                cache.version,
                None if slots is None else _table(slots, self.arena.slot_ids),
            )
            self.tables[layer] = t
        return t[2]

    def fetch(
        self, layer: int, experts: list[int], counts: list[int]
    ) -> tuple[np.ndarray, list[int]]:
        """Slots holding `experts` (sorted, distinct) of `layer`, reading the misses; and the
        experts that missed. A failed read raises StoreError after its keys are forgotten: no
        later step can hit a slot that holds a partial or stale block."""
        base = layer * self.key_stride
        keys = [e + base for e in experts]
        inflight = self.inflight
        if inflight:  # lookahead reads into keys about to hit must land (or fail) first
            slot_of = self.cache.slot_of
            landing = [s for k in keys if (s := slot_of(k)) in inflight]
            if landing:
                self.settle(landing)
        misses = self.cache.access(keys, counts)
        if misses:
            fresh = frozenset(slot for _, slot in misses)
            self.settle(fresh, fresh)  # a reused slot may still have an older read landing
            self._fill(misses)
        return self.cache.slots(keys), [key - base for key, _ in misses]

    def adopt(self, other: Ordered) -> list[int]:
        """The cache takes `other`'s state (ExpertCache.adopt: `--gamma auto`'s re-sync to
        plain decoding's shadow), reading the blocks it lacks; returns their cache keys. Every
        read still landing is awaited and every output computing on slots evaluated first: any
        slot may be refilled."""
        self.settle_all()
        reqs = self.cache.adopt(other)
        if reqs:
            self._fill(reqs)
        return [key for key, _ in reqs]

    def _fill(self, reqs: list[tuple[int, int]]) -> None:
        """Read (key, slot) pairs just handed out, once every output computing on slots is
        evaluated; a failed read forgets their keys first (no later step hits a slot holding a
        partial or stale block) and raises."""
        self.flush()
        try:
            self.reader.read(self._requests(reqs))
        except StoreError:
            self.cache.forget(key for key, _ in reqs)
            raise

    def hit(self, layer: int, experts: list[int], counts: list[int]) -> None:
        """The cache step of a call computed on a device table (all hits: residency has not
        moved since its table was built)."""
        base = layer * self.key_stride
        if self.cache.access([e + base for e in experts], counts):
            raise AssertionError("a deferred step missed: residency moved under it")

    def prefetch(
        self, layer: int, experts: list[int], at: int, using: list[int], running: mx.array
    ) -> list[int]:
        """Start reading `experts` of `layer` not resident, without waiting; never evicts the
        experts `using` of layer `at`, whose output `running` is left computing meanwhile.
        Returns the experts it started reading."""
        s = self.key_stride
        keys = [e + layer * s for e in experts]
        if None not in map(self.cache.slot_of, keys):  # all resident: nothing to read, no step
            return []
        reqs = self.cache.prefetch(keys, [e + at * s for e in using])
        if not reqs:
            return []
        self.flush(keep=running)
        fresh = frozenset(slot for _, slot in reqs)
        self.settle(fresh, fresh)
        batch = Prefetch(self.reader.submit(self._requests(reqs)), reqs)
        for _, slot in reqs:
            self.inflight[slot] = batch
        return [key - layer * s for key, _ in reqs]

    def resident_slots(self, layer: int, experts: list[int]) -> np.ndarray:
        """Slot of each expert id if resident, else -1. Reads nothing, touches nothing."""
        slot_of, base = self.cache.slot_of, layer * self.key_stride
        return np.array([-1 if (s := slot_of(e + base)) is None else s for e in experts])

    def track(self, y: mx.array) -> None:
        """`y` computes on slots: it is evaluated before any of them is refilled."""
        self.pending.append(y)
        # bound the list: most are long evaluated by now (a prefill's last MoE output, which
        # nothing reads, is computed here: decode/state.py `feed`)
        if len(self.pending) > 64:
            self.flush(keep=y)

    def flush(self, keep: mx.array | None = None) -> None:
        """Evaluate every pending output (but `keep`, whose slots the caller protects)."""
        todo = [y for y in self.pending if y is not keep]
        if todo:
            mx.eval(todo)
        self.pending = [keep] if keep is not None and any(y is keep for y in self.pending) else []

    def settle(self, slots, fresh: frozenset[int] = frozenset()) -> None:
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

    def settle_all(self) -> None:
        """Wait for every read still landing (a failed lookahead batch's keys forgotten)."""
        self.settle(list(self.inflight))

    def preload(self, warm: tuple[int, ...] = ()) -> None:
        """Read the policy's preload set (a seeded hotlist) into an empty cache; then every
        expert of the `warm` layers too, as mlx-lm loads every weight before decoding. On CUDA a
        warm load also lands them on the GPU (one read of the arena by a GPU computation): the
        arena is managed memory, so the first kernel on a freshly read page migrates it there,
        which mlx-lm's load pays before decoding and a warm load must pay too."""
        reqs = self.cache.preload()
        if warm:
            index = self.index
            keys = [
                lid * self.key_stride + e
                for lid in warm
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
        if warm and on_cuda():
            self.arena.touch()

    def _requests(self, misses: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        s = self.key_stride
        return [(key // s, key % s, slot) for key, slot in misses]


def _table(slots: np.ndarray, ids: mx.Dtype) -> SlotTable:
    """The SlotTable of a layer whose experts sit in `slots` [n_experts], as slot ids `ids`."""
    run = bool((np.diff(slots) == 1).all())
    return SlotTable(mx.array(slots, dtype=ids), int(slots[0]) if run else None)
