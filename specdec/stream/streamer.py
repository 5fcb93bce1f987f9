"""The expert path of one loaded model: the `Streamer` the streamed MoE blocks share.

    with sm.streamer.serving(Call("draft")):   # how this forward's MoE calls are served
        sm.model(tokens, cache=kv)
    steps = sm.streamer.drain()                # its cache steps (LayerStep), phase by phase

It joins four parts, each with one job: the expert source (`source.ExpertSource`: cache,
reader, slots), the step log and its routing observers (`steplog.StepLog`), the router
lookahead (`Lookahead`: which later layer each layer predicts), and the host steps deferred
from calls computed on device slot tables (`Deferred`). Per MoE call it runs the host part:
observers, one cache step (or one per chunk of positions whose union fits), the per-forward
tick. `specdec.stream.streamed` holds the MoE block that calls it; its docstring says how a call
flows.

Counted steps (`Streamer.counted`): where every streamed expert is resident and the cache holds
them all, nothing is ever read, evicted or admitted again, so a one-position call's step is known
without its routing: k distinct experts (a family whose router takes the top k of its scores:
`Family.distinct_picks`), all hits. Plain greedy decoding there defers the call's k instead of its
routing: no routing is joined on the device or read to the host, and the cache counts the hits
without telling its policy (whose order can no longer choose anything). Measured on an H100 at full
budget (`loop_parts`, the thirtieth session, docs/results/cuda.md): the join, the reads and the
replay were 145-230 µs of a 1.2-1.8 ms token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from specdec.cache.expert_cache import Ordered, position_chunks
from specdec.checkpoint.families import Route
from specdec.core.accelerator import to_host
from specdec.stream.source import ExpertSource
from specdec.stream.steplog import Call, LayerStep, StepLog

VERIFY = Call("verify")


@dataclass
class Lookahead:
    """Router lookahead: MoE layer L evaluates the router of the MoE layer `distance` MoE layers
    later on its own input, and the predicted experts start reading (0 = off).

    The prediction runs through mx.compile (one graph node to build instead of the router's
    several: 2 µs of host time instead of 5.4 on tiny); it only picks what to read ahead, the
    layer's own routing stays the family's uncompiled code, so streamed logits stay exact.
    """

    distance: int = 0
    ahead_of: dict[int, tuple[int, nn.Module]] = field(default_factory=dict)  # L -> (L+d, block)
    # L+d -> its router's choice, compiled at first use (the weights are loaded by then; a
    # compiled function keeps the arrays it closed over, which never change after load)
    predictors: dict[int, Callable[[mx.array], mx.array]] = field(default_factory=dict)

    def route(
        self, layer: int, x: mx.array, resident_here: bool, source: ExpertSource, route: Route
    ) -> tuple[int, mx.array] | None:
        """(L+d, its router's choice [..., k] on `layer`'s input x), lazy; None when L+d's
        prefetch could read nothing (this layer and L+d wholly resident: no step between)."""
        target, block = self.ahead_of[layer]
        if resident_here and source.table(target) is not None:
            return None
        predict = self.predictors.get(target)
        if predict is None:
            predict = self.predictors[target] = mx.compile(lambda x: route(block, x)[0])
        return target, predict(x)  # [..., k]


@dataclass(frozen=True)
class JoinedPart:
    """A deferred call's routing as a slice of its forward's routing joined (`Deferred.join`)."""

    joined: mx.array  # [total]: every joined call's indices, flattened, in call order
    at: int
    shape: tuple[int, ...]  # the call's indices [..., k]


# a call's own device array, its part of a joined one, or (a counted step) its k alone
Routing = mx.array | JoinedPart | int


@dataclass
class Deferred:
    """Calls computed on a device table whose host part is still to run, in call order:
    (layer, indices [..., k] on the device, or its part of its forward's joined routing, or a
    counted call's k: `Streamer.counted`, phase)."""

    BOUND = 1024  # past this many a call runs them (model calls with no drain between)

    calls: list[tuple[int, Routing, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.calls)

    def add(self, layer: int, indices: mx.array | int, phase: str) -> None:
        self.calls.append((layer, indices, phase))

    def take(self, n: int | None = None) -> list[tuple[int, Routing, str]]:
        """The first n calls (None: all), no longer deferred."""
        n = len(self.calls) if n is None else n
        out, self.calls = self.calls[:n], self.calls[n:]
        return out

    def clear(self) -> None:
        self.calls.clear()

    def join(self, since: int) -> mx.array | None:
        """The routing of the calls from `since` on (one forward's) joined into one lazy array,
        each call's entry then its part of it; None when there is nothing to join. Evaluated
        with the forward, it reads to the host with one copy (`Streamer.catch_up`): on the
        H200 a host read of a small device array cost 14-33 µs in a decode, one a MoE call
        ~60 µs of a 1.2-2 ms token at full budget (docs/results/cuda.md)."""
        mine = [i for i in range(since, len(self.calls)) if isinstance(self.calls[i][1], mx.array)]
        if len(mine) < 2:  # added by this forward: each its own device array (or counted)
            return None
        joined = mx.concatenate([self.calls[i][1].reshape(-1) for i in mine])  # [total]
        at = 0
        for i in mine:
            layer, idx, phase = self.calls[i]
            self.calls[i] = (layer, JoinedPart(joined, at, tuple(idx.shape)), phase)
            at += idx.size
        return joined


@dataclass
class Streamer:
    """The expert path of one model: its parts, and the host part of each MoE call."""

    source: ExpertSource
    # The main model's last MoE layer: the cache ticks after its step, once per forward.
    last_layer: int
    lookahead: Lookahead = field(default_factory=Lookahead)
    log: StepLog = field(default_factory=StepLog)
    deferred: Deferred = field(default_factory=Deferred)
    # preload reads every expert of the `streamed` layers (--warm; the budget must hold them
    # all), so an MTP layer not loaded is not read
    warm: bool = False
    current: Call = VERIFY  # how the forward now running is served (`serving`)
    # routing given from outside (`--routing trace:DIR`, decode/trace_routing.py): layer id,
    # the router's idx [..., k] -> the experts to use instead; None: the router's own
    route_override: Callable[[int, np.ndarray], np.ndarray] | None = None
    streamed: tuple[int, ...] = ()  # the MoE layers this model streams (an MTP layer if loaded)
    counting: bool = False  # one-position calls on device tables defer their k (`counted`)

    # the source's parts, for callers that inspect them (stats, tests, probes)
    index = property(lambda self: self.source.index)
    arena = property(lambda self: self.source.arena)
    reader = property(lambda self: self.source.reader)
    cache = property(lambda self: self.source.cache)
    key_stride = property(lambda self: self.source.key_stride)

    @contextmanager
    def serving(self, call: Call) -> Iterator[None]:
        """The MoE calls inside the block are served as `call` says (phase, resident only)."""
        saved, self.current = self.current, call
        try:
            yield
        finally:
            self.current = saved

    def all_resident(self, layers: Iterable[int]) -> bool:
        """True when a forward over these layers can need no read (nor host sync)."""
        return all(self.source.table(lid) is not None for lid in layers)

    @contextmanager
    def counted(self, distinct_picks: bool) -> Iterator[bool]:
        """Inside the block, a one-position call computed on a device table defers its k, not
        its routing, where its step is known without it (module doc): the family's picks are
        distinct, every streamed expert is resident and the cache holds them all, and nothing
        else wants the routing (no observer, no verdict notes, no given routing, no lookahead),
        nor the cache its keys (one cache, not a mixed pack's pools). Yields whether it
        counts."""
        cache = self.source.cache
        counts = (
            distinct_picks
            and self.source.holds_all
            and bool(self.streamed)  # none named: nothing is known resident
            and self.all_resident(self.streamed)
            and not (self.log.observers or cache.noting or self.lookahead.ahead_of)
            and self.route_override is None
            # a pooled cache (mixed precision) splits its counters by pool: it needs the keys
            and hasattr(cache, "count_hits")
        )
        saved, self.counting = self.counting, counts
        try:
            yield counts
        finally:
            self.counting = saved

    def counts(self, indices: mx.array) -> bool:
        """Whether a call on a device table defers its k, not its routing [..., k]: inside
        `counted`, one position, and no observer come since (a decode's generator left open
        while another run watches)."""
        return self.counting and indices.size == indices.shape[-1] and not self.log.observers

    def sync(self, indices: mx.array, ahead: mx.array | None) -> np.ndarray:
        """The router's choice on the host; the lookahead router's is evaluated with it (one
        evaluation, the one the layer does anyway)."""
        if ahead is not None:
            mx.eval(indices, ahead)
        return to_host(indices)

    def routed(self, layer: int, idx: np.ndarray) -> np.ndarray:
        """The experts the call uses: the router's, or the override's at this layer."""
        return idx if self.route_override is None else self.route_override(layer, idx)

    def steps(
        self, layer: int, idx: np.ndarray, phase: str, replay: bool = False
    ) -> Iterator[tuple[np.ndarray, list[int], np.ndarray | None]]:
        """The host part of a call on `idx` [..., k], shared by the synced and deferred paths:
        the observers, then its cache step, yielded as (idx, experts, slots); or, when its
        union exceeds a step, one per group of positions whose union fits, yielded as
        (positions [n, k], experts, slots) before the next may read; then the per-forward
        tick. replay: a deferred call's steps, all hits (slots None)."""
        self.log.observe(layer, idx, phase)
        cache = self.source.cache
        if cache.noting and phase == "verify":  # +demote/+protect: routing for the verdict
            cache.note(layer * self.source.key_stride, idx)
        experts, counts = union(idx)
        if len(experts) <= cache.max_step:
            yield idx, experts, self._step(layer, experts, counts, phase, replay)
        else:
            for chunk in position_chunks(idx.reshape(-1, idx.shape[-1]), cache.max_step):
                part, n = union(chunk)
                yield chunk, part, self._step(layer, part, n, phase, replay)
        if layer == self.last_layer:
            cache.tick(math.prod(idx.shape[:-1]))

    def _step(
        self, layer: int, experts: list[int], counts: list[int], phase: str, replay: bool
    ) -> np.ndarray | None:
        if replay:
            self.source.hit(layer, experts, counts)
            self.log.add(LayerStep(layer, len(experts), 0, 0, phase, synced=False))
            return None
        slots, missed = self.source.fetch(layer, experts, counts)
        nbytes = self.source.index.layers[layer].bytes_of(missed)  # a mixed pack: two sizes
        self.log.add(LayerStep(layer, len(experts), len(missed), nbytes, phase))
        return slots

    def prefetch(
        self, layer: int, ahead: mx.array, running: tuple[int, list[int], mx.array], phase: str
    ) -> None:
        """Start reading the experts `ahead` [..., k] (evaluated) predicts for `layer` without
        waiting; never evicts the experts of `running` = (its layer, its experts, the output
        left computing on them meanwhile)."""
        started = self.source.prefetch(layer, choice(ahead), *running)
        if started:
            nbytes = self.source.index.layers[layer].bytes_of(started)  # a mixed pack: two sizes
            self.log.add(LayerStep(layer, 0, 0, nbytes, phase, len(started)))

    def adopt(self, other: Ordered) -> None:
        """The cache takes `other`'s state, reading what it lacks (ExpertSource.adopt); one step
        per layer read, logged under phase "resync" (no union: nothing computes on them). Calls
        computed on device tables and not yet stepped are stepped first, on the cache they ran
        on."""
        self.catch_up()
        stride, read = self.source.key_stride, {}
        for key in self.source.adopt(other):
            read.setdefault(key // stride, []).append(key % stride)
        for layer, experts in sorted(read.items()):
            nbytes = self.source.index.layers[layer].bytes_of(experts)
            self.log.add(LayerStep(layer, 0, len(experts), nbytes, "resync"))

    def catch_up(self, n: int | None = None) -> None:
        """Run the host part of the first n deferred calls (None: all), in call order:
        observers, cache step (all hits), step log and the per-forward tick. Reads their router
        choices: one host copy a joined forward (`Deferred.join`), one a call otherwise."""
        read: dict[int, np.ndarray] = {}  # id of a joined array -> it on the host
        for layer, idx, phase in self.deferred.take(n):
            if isinstance(idx, int):  # counted: k distinct experts, all hits
                self._count(layer, idx, phase)
                continue
            for _ in self.steps(layer, _on_host(idx, read), phase, replay=True):
                pass

    def _count(self, layer: int, k: int, phase: str) -> None:
        """A counted call's step (`counted`): the step a replay would log, its k hits counted."""
        cache = self.source.cache
        cache.count_hits(k)
        self.log.add(LayerStep(layer, k, 0, 0, phase, synced=False))
        if layer == self.last_layer:
            cache.tick(1)

    def drain(self, deferred: int | None = None) -> list[LayerStep]:
        """The steps logged since the last drain (the decode loop calls this once per phase),
        with those of the first `deferred` deferred calls (None: all; the rest belong to a
        later forward already started)."""
        self.catch_up(deferred)
        return self.log.drain()

    def preload(self) -> None:
        """Read the policy's preload set, and with --warm every expert of the streamed layers."""
        self.source.preload(self.streamed if self.warm else ())


def choice(ahead: mx.array) -> list[int]:
    """Sorted distinct experts of an evaluated router choice [..., k]; one position's straight
    from the array (a numpy copy and bincount cost ~1 µs more, per lookahead)."""
    if ahead.size == ahead.shape[-1]:
        ids = ahead.tolist()
        for _ in range(ahead.ndim - 1):
            ids = ids[0]
        if len(set(ids)) == len(ids):
            return sorted(ids)
    return union(to_host(ahead))[0]


def _on_host(idx: Routing, read: dict[int, np.ndarray]) -> np.ndarray:
    """A deferred call's routing [..., k] on the host; a joined array is read once (`read`)."""
    if isinstance(idx, mx.array):
        return to_host(idx)
    flat = read.get(id(idx.joined))
    if flat is None:
        flat = read[id(idx.joined)] = to_host(idx.joined)
    return flat[idx.at : idx.at + math.prod(idx.shape)].reshape(idx.shape)


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
