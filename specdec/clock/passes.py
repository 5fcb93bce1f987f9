"""Modeled time of one verify pass: the forwards it runs, built from what the decode loop logged.

    clock = PassClock.for_decode(sm, drafter)          # once per decode
    parts = clock.modeled(profile, drafted=3, context=120,
                          draft_steps=..., verify_steps=..., measured_compute_s=0.02)

Forwards of one pass (shapes from the packed config.json, MoE layers from its experts.json):

- verify: one forward of the main model over γ positions, per-layer unions and reads as logged
  (in the decode form computed as γ one-position forwards compute, each position past the first
  also paying the profile's `position_s` per MoE layer: its calls are one-token calls of their
  own; `verify_form="native"`, or a profile whose runtime verifies batched, neither);
- draft phase, by the drafter's `draft_compute` (`self` is "main", `mtp` "mtp", `draft` "model",
  the rest "none"): `self` runs the main model γ − 1 times on one position over resident
  experts only (top-k per MoE layer, no reads); `mtp` runs its one decoder layer + head γ − 1
  times (its logged MoE steps split evenly over the calls, a call's chunks summed, one position
  each: its catch-up call over the accepted positions runs its MoE on the last one alone, and
  its attention, charged as one position, is a FLOP undercount only); `draft` runs
  the resident draft model γ − 1 times (its own shape, top-k experts if it is a MoE);
  `lookup`, `oracle` and `none` compute nothing on the device.

Where a layer's state cannot be trimmed (Qwen3-Next), a pass that rejects a draft also runs the
main model once more over its accepted prefix (decode/rollback.py), modeled as one more forward.
The prompt's prefill is not part of any pass (as in the records).
Tests: `pytest tests/clock/test_clock_model.py`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specdec.clock.profiles import DeviceProfile
from specdec.clock.roofline import (
    Forward,
    ModeledTime,
    ReadStep,
    compute_parts,
    forward_time,
    measured_time,
    reads_time,
)
from specdec.clock.shapes import ModelShape


@dataclass(frozen=True)
class _Logged:
    """A cache step as a record keeps it: what `read_steps` and `layer_unions` read of one."""

    layer: int
    union: int
    misses: int
    bytes_read: int
    prefetched: int = 0
    synced: bool = True


def read_steps(steps: Sequence) -> tuple[ReadStep, ...]:
    """The clock's view of the streamer's LayerSteps."""
    return tuple(
        ReadStep(
            s.layer, s.misses, s.bytes_read, getattr(s, "prefetched", 0), getattr(s, "synced", True)
        )
        for s in steps
    )


def resync_time(profile: DeviceProfile, reads: float, block_bytes: float) -> float:
    """Modeled seconds of `--gamma auto` re-syncing `reads` blocks of `block_bytes` (rounded up
    to whole reads): one batch nothing hides, as `PassClock.modeled` prices a re-sync's steps."""
    n = int(np.ceil(reads - 1e-9))
    return reads_time(profile, (ReadStep(0, n, int(n * block_bytes)),)).total_s


def layer_unions(steps: Sequence) -> dict[int, int]:
    """Experts computed per layer: a forward's steps' unions summed by layer (chunks add up)."""
    unions: dict[int, int] = {}
    for s in steps:
        unions[s.layer] = unions.get(s.layer, 0) + s.union
    return unions


@dataclass(frozen=True)
class PassClock:
    shape: ModelShape  # the main model (and its MTP layer, when it has one)
    main_layers: tuple[int, ...]  # decoder layers of the main model, in order
    draft_compute: str  # Drafter.draft_compute: what one draft runs on the device
    draft_shape: ModelShape | None = None  # the draft model's, for draft_compute "model"
    mtp_layer: int | None = None
    # how verify (and a rollback's re-feed) computes its positions (decode/verify_form.py):
    # "decode" position by position (priced as one-position forwards, plus `position_s`);
    # "native" batched
    verify_form: str = "decode"

    @classmethod
    def for_decode(cls, sm, drafter, verify_form: str = "decode") -> PassClock:
        """From a loaded StreamedModel, the decode's Drafter and its verify form."""
        shape = ModelShape.from_config(sm.config, moe_layers=sm.streamer.index.layer_ids)
        n_main = len(sm.model.layers)
        kind = drafter.draft_compute
        draft_shape = ModelShape.from_config(drafter.model_config()) if kind == "model" else None
        mtp = n_main if kind == "mtp" else None
        return cls(shape, tuple(range(n_main)), kind, draft_shape, mtp, verify_form)

    def _topk_unions(self, shape: ModelShape) -> dict[int, int]:
        return {layer: shape.top_k for layer in shape.moe_layers}

    def draft_forwards(self, drafted: int, context: int, steps: tuple[ReadStep, ...]) -> list:
        """The draft phase's forwards, each with its device shape."""
        if drafted == 0:
            return []
        if self.draft_compute == "main":
            fwd = Forward(1, context, self.main_layers, self._topk_unions(self.shape))
            return [(self.shape, fwd)] * drafted
        if self.draft_compute == "model" and self.draft_shape is not None:
            s = self.draft_shape
            fwd = Forward(1, context, tuple(range(s.n_layers)), self._topk_unions(s))
            return [(s, fwd)] * drafted
        if self.draft_compute == "mtp" and self.mtp_layer is not None:
            out = []
            for own in draft_parts(steps, drafted):
                unions = {self.mtp_layer: sum(s.union for s in own) or self.shape.top_k}
                fwd = Forward(1, context, (self.mtp_layer,), unions, read_steps(own))
                out.append((self.shape, fwd))
            return out
        return []

    def _verify(self, drafted: int, context: int, steps: Sequence) -> Forward:
        """The main model's forward over `drafted` + 1 positions with logged `steps`' unions and
        reads (a verify, or a rollback's re-feed)."""
        return self._main(drafted + 1, context, layer_unions(steps), read_steps(steps))

    def _main(self, positions: int, context: int, unions: dict, reads: tuple) -> Forward:
        """The main model's forward over `positions` with `unions` per layer and `reads`
        (ReadSteps), position by position in the decode form."""
        each = self.verify_form == "decode"
        return Forward(positions, context, self.main_layers, unions, reads, positionwise=each)

    def modeled(
        self,
        profile: DeviceProfile,
        *,
        drafted: int,
        context: int,
        draft_steps: Sequence,
        verify_steps: Sequence,
        measured_compute_s: float,
        refeed: tuple[int, Sequence] = (0, ()),
        draft_forwards: int | None = None,
        resync_steps: Sequence = (),
    ) -> ModeledTime:
        """Modeled seconds of one pass on `profile`, by part; `refeed`: (positions, steps) of the
        forward that re-feeds the accepted prefix after a rollback (decode/rollback.py);
        `draft_forwards`: draft forwards run when not one per kept draft (a draft stop,
        decode/draft_stop.py, runs up to two it drops); `resync_steps`: the reads of `--gamma
        auto`'s re-sync before the pass (specdec.gamma.chooser), one batch nothing hides."""
        refed, refeed_steps = refeed
        if profile.compute == "measured":
            return measured_time(
                profile,
                measured_compute_s,
                read_steps([*resync_steps, *draft_steps, *verify_steps, *refeed_steps]),
            )
        ran = drafted if draft_forwards is None else draft_forwards
        forwards = self.draft_forwards(ran, context, tuple(draft_steps))
        # the verify pass runs the drafts plus the last committed token: the last pass of a
        # generation may draft fewer than γ - 1, so γ is taken from what was drafted
        forwards = [*forwards, (self.shape, self._verify(drafted, context, verify_steps))]
        if refed:
            forwards.append((self.shape, self._verify(refed - 1, context, refeed_steps)))
        out = forwards_time(profile, forwards)
        if resync_steps:
            out.add(reads_time(profile, read_steps(resync_steps)))
        return out

    def remodel(self, profile: DeviceProfile, rec) -> ModeledTime:
        """A recorded pass (decode.records.PassRecord with its `steps`) modeled on `profile`:
        the device model checked afterwards, or on a profile the run was not given."""

        def steps(phase: str) -> list[ReadStep]:
            return [
                _Logged(layer, union, misses, nbytes, pre, bool(synced))
                for layer, union, misses, nbytes, pre, synced in rec.steps.get(phase, ())
            ]

        return self.modeled(
            profile,
            drafted=rec.drafted,
            context=rec.context,
            draft_steps=steps("draft"),
            verify_steps=steps("verify"),
            # as the run modeled it: before `--gamma auto`'s bookkeeping joined the pass
            measured_compute_s=rec.compute_s - rec.books_s,
            refeed=(rec.refed, steps("refeed")),
            draft_forwards=rec.draft_forwards,
            resync_steps=steps("resync"),
        )

    def expected(
        self,
        profile: DeviceProfile,
        gamma: int,
        context: int,
        layers: Sequence[int],
        union: np.ndarray,
        misses: np.ndarray,
        block_bytes,
        draft_union: float | np.ndarray = 0.0,
        draft_misses: float | np.ndarray = 0.0,
    ) -> float:
        """Modeled seconds of a pass not yet run (`--gamma auto`'s cost): γ positions, expected
        verify union and misses per MoE layer in `layers` ([L] each), and, per draft (one value
        for every draft, or [γ − 1] in order), the draft phase's expected union and misses on
        the MTP layer (other drafters read nothing while drafting). Reads come whole and a
        pass's time is not linear in them (one read in a layer stalls it, more overlap), so
        `misses` summing to m + f (0 <= f < 1) is costed as m reads with weight 1 − f and m + 1
        with weight f (each spread over the layers as `misses` is): the expected time of whole
        reads with that mean. Rounding instead costed plain decoding at 0.6 expected misses per
        token as a full read every token (bundled model, m5, 25%: 0.21 ms where its passes
        average 0.15 ms)."""
        misses = np.asarray(misses, np.float64)
        total = float(misses.sum())
        unions = dict(zip(layers, np.asarray(union, np.float64).tolist(), strict=True))
        # the forwards of m and m + 1 reads compute alike: their parts priced once
        parts = compute_parts(profile, self.shape, self._main(gamma, context, unions, ()))

        def verify_s(reads: float) -> float:
            spread = misses * (reads / total) if total > 0 else misses  # [L] summing to reads
            fwd = self._main(gamma, context, unions, expected_reads(layers, spread, block_bytes))
            return forward_time(profile, self.shape, fwd, parts).total_s

        out = whole_reads_mean(verify_s, total)
        n = gamma - 1
        if n <= 0:
            return out
        if self.mtp_layer is None:  # drafts that read nothing (self, a draft model) or none
            return out + forwards_time(profile, self.draft_forwards(n, context, ())).total_s
        # each draft is a forward of its own: its reads' mean taken on its own (a draft that
        # misses 0.65 on average reads nothing in a third of passes and waits for nothing)
        size, times = float(np.mean(block_bytes)), {}

        def draft_s(u: float, reads: float) -> float:  # one draft forward, memoised
            if (u, reads) not in times:
                r = int(round(reads))
                step = StepCounts(self.mtp_layer, u, r, int(r * size))
                times[u, reads] = forwards_time(profile, self.draft_forwards(1, context, (step,)))
            return times[u, reads].total_s

        for u, m in zip(_per_draft(draft_union, n), _per_draft(draft_misses, n), strict=True):
            out += whole_reads_mean(functools.partial(draft_s, u), m)
        return out


def _per_draft(x: float | np.ndarray, n: int) -> list[float]:
    """[n] one value per draft: `x` for each, or `x`'s own (an [n] array)."""
    a = np.asarray(x, np.float64)
    return [float(a)] * n if a.ndim == 0 else np.broadcast_to(a, (n,)).tolist()


def draft_parts(steps: Sequence, calls: int) -> list[tuple]:
    """A draft phase's logged steps split evenly over its `calls` forwards, in order (a wide
    call logs several steps): how the clock and `--gamma auto` read one draft's reads."""
    return [tuple(steps[i] for i in part) for part in np.array_split(np.arange(len(steps)), calls)]


def forwards_time(profile: DeviceProfile, forwards: Sequence) -> ModeledTime:
    """Modeled time of (shape, Forward) pairs run one after another; a forward listed more than
    once (a self-draft's γ − 1 identical ones) is timed once."""
    total, seen = ModeledTime(), {}
    for shape, fwd in forwards:
        if id(fwd) not in seen:
            seen[id(fwd)] = forward_time(profile, shape, fwd)
        total.add(seen[id(fwd)])
    return total


def whole_reads_mean(seconds: Callable[[float], float], mean: float) -> float:
    """The expected seconds of a forward whose reads are whole and `mean` on average: m + f
    (0 <= f < 1) costed as m reads with weight 1 − f and m + 1 with weight f."""
    whole = float(math.floor(mean + 1e-9))
    frac = mean - whole
    if frac < 1e-9:
        return seconds(whole)
    return (1.0 - frac) * seconds(whole) + frac * seconds(whole + 1.0)


@dataclass(frozen=True)
class StepCounts:
    """A cache step as the clock reads it (a LayerStep's fields), for passes not yet run."""

    layer: int
    union: float
    misses: int
    bytes_read: int


def expected_reads(layers, misses: np.ndarray, block_bytes) -> tuple[ReadStep, ...]:
    """Per-layer reads of expected misses ([L] floats; `block_bytes` one per layer or one for
    all). Reads come whole: the misses are rounded cumulatively over the layers, so their sum
    is kept (0.3 per layer over 10 layers is 3 reads, not 0). A layer rounded to none gets no
    step: the clock reads a layer without steps as one that misses nothing (it syncs). Plain
    Python over the layers: numpy's calls cost more than the arithmetic on L values (cumsum's
    running sum and round-half-even are the same operations, so the same reads)."""
    size = np.asarray(block_bytes, np.float64)
    sizes = size.tolist() if size.ndim else [float(size)] * len(layers)
    out, issued, running = [], 0, 0.0  # reads so far; the misses' running sum
    for layer, m, b in zip(layers, misses.tolist(), sizes, strict=True):
        running += m
        n = round(running) - issued
        issued += n
        if n:
            out.append(ReadStep(layer, n, int(n * b)))
    return tuple(out)
