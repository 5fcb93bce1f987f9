"""Draft length by the drafter's own routing: `--gamma auto` stops the self-draft early.

    stops = DraftStops.build(sm, chooser, "stop")         # once per decode (None: nothing to do)
    stop = stops.begin(choice, gamma, context, tap.calls)  # per pass, before drafting
    drafts, q = drafter.propose(st, gamma - 1, stop)       # calls stop.after(step) per draft step
    rec.draft_routing = stop.record(tap.calls, len(drafts) + 1)

The cache-only self-draft (drafters/self_draft.py) runs the target on resident experts only, one
position per forward: draft step i runs on the input that the verify pass's position i will have
(step 0 on y, the last committed token; step i on draft i). Its routers therefore tell, before
verify runs, which experts verify's positions 0..i will select: exactly at the first MoE layer (its
input is the same embedding and attention over the same keys), approximately deeper (their inputs
differ where a dropped expert mattered). The self-draft reads nothing, so the cache's resident set
is the one verify will meet, and a selected expert not resident is a predicted verify miss.

The rule. After draft step i ≥ 1, position i (draft i) has a predicted union and misses per MoE
layer; the pass stops there, verifying positions 0..i−1 (drafts 1..i−1), when verifying one more
position is expected to lower the pass's committed tokens per modeled second ("rate"), or to push
its bytes per committed token above the chooser's allowance, plain decoding's expected bytes
per token, while raising them ("bytes"). Expected tokens are the chooser's `expected_tokens(γ)`
(its live per-position acceptance), cost its `cost(γ, ...)` (the device model) fed the predicted
union and misses; the i + 1 draft forwards already run are sunk, charged to both sides (one
forward's cost is taken as cost(2) − cost(1) at the same reads). Otherwise drafting continues up
to the chooser's γ; the last draft's own position (γ − 1) is verified on the chooser's estimate,
since knowing its routing would take one more draft forward ("cap"). Verifying a prefix of the
drafts is exact, so decoding stays lossless; the forwards a stop leaves unused are charged to
the pass (PassClock.modeled's `draft_forwards`).

Records: `PassRecord.draft_routing` holds, per pass with drafts, the γ chosen and verified, why
drafting ended, the forwards run, and per MoE layer the union and misses the draft's routing
predicted for the first `positions` positions beside what verify's routing then selected on the
same positions against the same resident set (`hit_misses`: the predicted misses that were
misses), and the predicted misses summed over layers for each γ the draft routed
(`misses_by_gamma`: what each further position would have added). Mode "record" fills the
records and never stops (any γ: the benchmark's fixed γ and its auto without the stop);
"stop" stops under `--gamma auto` only; "off" does neither.
Bench: benchmarks/bench_draft_stop.py. Tests: `pytest tests/gamma/test_draft_stop.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specdec.gamma.chooser import Choice, GammaChooser

StopMode = Literal["stop", "record", "off"]
MODES = ("stop", "record", "off")


@dataclass(frozen=True)
class Option:
    """Verifying γ positions of the pass now being drafted, as predicted."""

    tokens: float  # expected committed tokens
    seconds: float  # modeled seconds of the pass (the draft forwards spent included)
    bytes: float  # predicted verify bytes read

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens


@dataclass
class DraftStop:
    """One pass: the draft's routing so far, the rule, and what it predicted."""

    chooser: GammaChooser | None  # None: record only
    context: int  # positions in the KV cache before the pass
    cap: int  # the pass's γ as chosen (or fixed)
    resident: np.ndarray  # [L, E] bool: resident before the pass (the self-draft reads nothing)
    rows: dict[int, int]  # MoE layer id -> its row in `resident`
    calls: list  # the pass's (layer, indices [..., k], phase) routing calls, appended as they run
    block_bytes: float  # bytes of one expert
    allowed: float | None  # bytes per committed token the chooser allows; None: not known yet
    steps: int = 0  # draft forwards run
    why: str = "cap"  # "cap", "rate" or "bytes"
    _known: np.ndarray = field(init=False)  # [L, E] experts the positions routed so far select
    _seen: int = 0  # calls consumed
    _seen_at: list[np.ndarray] = field(default_factory=list)  # [L, E] of positions 0..i, per i
    _forward_s: float | None = None

    def __post_init__(self):
        self._known = np.zeros_like(self.resident)

    def after(self, step: int) -> bool:
        """Draft step `step` ran on position `step`: True to stop, keeping drafts 1..step−1."""
        self.steps = step + 1
        for layer, idx, phase in self.calls[self._seen :]:
            if phase == "draft" and layer in self.rows:
                self._known[self.rows[layer], idx.reshape(-1)] = True
        self._seen = len(self.calls)
        self._seen_at.append(self._known.copy())
        if self.chooser is None or step == 0:
            return False
        spent = step + 1
        shorter, longer = self._option(step, spent), self._option(step + 1, spent)
        if longer.rate < shorter.rate:
            self.why = "rate"
        elif (
            self.allowed is not None
            and longer.bytes_per_token > self.allowed
            and longer.bytes_per_token > shorter.bytes_per_token
        ):
            self.why = "bytes"
        else:
            return False
        return True

    def _option(self, gamma: int, spent: int) -> Option:
        """Verifying positions 0..γ−1 after `spent` draft forwards (the chooser's cost charges
        γ − 1 of them; the others were run all the same)."""
        union, misses = self._reads(gamma)
        cost = self.chooser.cost(gamma, self.context, union, misses, 0.0, 0.0)
        seconds = cost + (spent - (gamma - 1)) * self._forward()
        nbytes = float(misses.sum()) * self.block_bytes
        return Option(self.chooser.expected_tokens(gamma), seconds, nbytes)

    def _reads(self, gamma: int) -> tuple[np.ndarray, np.ndarray]:
        """([L] union, [L] misses) predicted of verifying positions 0..γ−1."""
        known = self._seen_at[gamma - 1]  # [L, E]
        return known.sum(1).astype(np.float64), (known & ~self.resident).sum(1).astype(np.float64)

    def _forward(self) -> float:
        """Modeled seconds of one draft forward: cost(2) − cost(1) over the same reads."""
        if self._forward_s is None:
            (u, m), cost = self._reads(1), self.chooser.cost
            self._forward_s = max(
                cost(2, self.context, u, m, 0.0, 0.0) - cost(1, self.context, u, m, 0.0, 0.0), 0.0
            )
        return self._forward_s

    def record(self, calls: list, verified: int) -> dict:
        """What the draft's routing predicted beside what verify's selected, on the positions
        both saw (`verified`: positions the verify pass ran); {} when nothing was drafted."""
        n = min(self.steps, verified)
        if n == 0:
            return {}
        actual = np.zeros_like(self.resident)  # [L, E]
        seen = np.zeros(len(self.rows), np.int64)  # [L] verify positions taken per layer
        for layer, idx, phase in calls:
            if phase == "verify" and layer in self.rows:
                row = self.rows[layer]
                take = idx.reshape(-1, idx.shape[-1])[: n - seen[row]]  # [≤ n, k]
                actual[row, take.reshape(-1)] = True
                seen[row] += len(take)
        predicted = self._seen_at[n - 1]  # [L, E]
        predicted_miss = predicted & ~self.resident
        actual_miss = actual & ~self.resident
        ids = sorted(self.rows, key=self.rows.get)

        def per_layer(counts: np.ndarray) -> dict[str, int]:
            return {str(lid): int(c) for lid, c in zip(ids, counts, strict=True)}

        return {
            "cap": self.cap,
            "verified": verified,
            "why": self.why,
            "steps": self.steps,
            "positions": n,
            "predicted_union": per_layer(predicted.sum(1)),
            "predicted_misses": per_layer(predicted_miss.sum(1)),
            "actual_union": per_layer(actual.sum(1)),
            "actual_misses": per_layer(actual_miss.sum(1)),
            "hit_misses": per_layer((predicted_miss & actual_miss).sum(1)),
            # all layers' predicted misses of verifying positions 0..γ−1, γ = 1..steps
            "misses_by_gamma": [int(self._reads(g)[1].sum()) for g in range(1, self.steps + 1)],
        }


@dataclass
class DraftStops:
    """A decode's draft stops: the resident-set layout, the mode, the chooser's last allowance."""

    sm: object  # the StreamedModel
    chooser: GammaChooser | None  # None: record only
    rows: dict[int, int]  # MoE layer id -> row
    allowed: float | None = None

    @classmethod
    def build(cls, sm, chooser: GammaChooser | None, mode: StopMode) -> DraftStops | None:
        """None where nothing is to be done: mode off, or "stop" without `--gamma auto`."""
        if mode == "off" or (mode == "stop" and chooser is None):
            return None
        rows = {lid: i for i, lid in enumerate(sm.main_moe_layers)}
        return cls(sm, chooser if mode == "stop" else None, rows)

    def begin(self, choice: Choice | None, gamma: int, context: int, calls: list) -> DraftStop:
        """The pass about to draft toward `gamma` positions; `calls` the tap's list, fed live."""
        if choice is not None:  # a block's first pass carries the candidates; holds reuse them
            plain = next((c for c in choice.candidates if c.gamma == 1), None)
            if plain is not None:
                self.allowed = plain.bytes / plain.tokens
        streamer = self.sm.streamer
        stride = streamer.key_stride
        resident = np.zeros((len(self.rows), stride), dtype=bool)  # [L, E]
        for key in streamer.cache.resident_keys():
            row = self.rows.get(key // stride)
            if row is not None:
                resident[row, key % stride] = True
        return DraftStop(
            self.chooser,
            context,
            gamma,
            resident,
            self.rows,
            calls,
            float(streamer.index.slot_bytes),
            self.allowed,
        )
