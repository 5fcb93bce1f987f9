"""The one routing recorder: the experts each MoE call routed to, as the streamed block used them.

    with recording(sm) as rec:          # observes the streamer's MoE calls inside the block
        ...decode...
    rec.take_verify_rows()   # per pass: {layer: [[k experts] per position]} (PassRecord.routing)
    rec.verify_routing()     # {layer: [T, k]} of the verify (decode) calls so far
    rec.calls                # every (layer, indices [..., k], phase), in call order

Records (decode.run), the union along the committed trace (decode.trace_union) and recorded
traces (probes.record) all take their routing from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


class RoutingRecorder:
    """A step-log observer: called with (layer, indices [..., k], phase) for every MoE call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, np.ndarray, str]] = []

    def __call__(self, layer: int, idx: np.ndarray, phase: str) -> None:
        self.calls.append((layer, idx, phase))

    def take(self) -> list[tuple[int, np.ndarray, str]]:
        """The calls so far, forgotten here."""
        calls, self.calls = self.calls, []
        return calls

    def take_verify_rows(self) -> dict[str, list[list[int]]]:
        """The verify phase's rows since the last take, per layer id (one pass's routing)."""
        rows: dict[str, list[list[int]]] = {}
        for layer, idx, phase in self.take():
            if phase == "verify":
                rows.setdefault(str(layer), []).extend(idx.reshape(-1, idx.shape[-1]).tolist())
        return rows

    def verify_routing(self) -> dict[int, np.ndarray]:
        """{layer: [T, k]} of the verify-phase calls, positions in call order."""
        seen: dict[int, list[np.ndarray]] = {}
        for layer, idx, phase in self.calls:
            if phase == "verify":
                seen.setdefault(layer, []).append(idx.reshape(-1, idx.shape[-1]))
        return {layer: np.concatenate(rows) for layer, rows in seen.items()}


@contextmanager
def recording(sm) -> Iterator[RoutingRecorder]:
    """Record `sm`'s routing inside the block (an observer of the streamer's step log)."""
    with sm.streamer.log.watching(RoutingRecorder()) as rec:
        yield rec
