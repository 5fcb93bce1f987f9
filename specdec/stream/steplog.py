"""The step log of the expert path: one `LayerStep` per cache step, and the routing observers.

    with sm.streamer.log.watching(rec):   # rec(layer, indices [..., k], phase) per MoE call
        ...decode...
    steps = sm.streamer.drain()           # the steps since the last drain (decode: per phase)

`Call` says how a forward's MoE calls are served: the phase its steps are logged under, and
whether the experts not resident are dropped instead of read (the cache-only self-drafter).
The streamer fills the log and tells the observers; decode drains the log and records routing
through an observer (decode.routing.RoutingRecorder), never by setting a field of the streamer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

# called with (layer, indices [..., k] int array, phase) for every MoE call, in call order
Observer = Callable[[int, np.ndarray, str], None]


@dataclass(frozen=True)
class Call:
    """How one forward's MoE calls are served."""

    phase: str = "verify"  # "verify", "draft", "prefill" (or a probe's own name)
    resident_only: bool = False  # drop experts not resident (gates renormalised), read nothing


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
class StepLog:
    """The cache steps since the last drain, and who is told of each call's routing."""

    steps: list[LayerStep] = field(default_factory=list)
    observers: list[Observer] = field(default_factory=list)

    def observe(self, layer: int, idx: np.ndarray, phase: str) -> None:
        """Tell every observer of one MoE call's routing `idx` [..., k]."""
        for obs in self.observers:
            obs(layer, idx, phase)

    def add(self, step: LayerStep) -> None:
        self.steps.append(step)

    def drain(self) -> list[LayerStep]:
        out, self.steps = self.steps, []
        return out

    @contextmanager
    def watching(self, obs: Observer) -> Iterator[Observer]:
        """`obs` observes every MoE call inside the block."""
        self.observers.append(obs)
        try:
            yield obs
        finally:
            self.observers.remove(obs)
