"""`--gamma auto` inside one decode: the chooser, its counterfactual caches and what it is taught
after each pass, kept out of the decode loop (specdec/decode/loop.py asks, then tells).

    auto = AutoGamma.build(sm, clock, profiles, seed)   # in Decode, when γ is auto and a drafter
    choice = auto.choose(context, left)                 # before a pass: its γ and why
    ... the pass runs and is recorded ...
    auto.observe(rec, calls, committed, context, ...)   # after: shadows fed, the chooser taught

Passes are priced in modeled device seconds on the first roofline profile the run was given,
else on the default profile (specdec.clock.auto_profile; a note on stderr says so when the run
was given profiles and none is roofline); `profile` says which, and the run summary records it.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specdec.cache.expert_cache import ExpertCache
from specdec.clock.passes import PassClock, draft_parts, resync_time
from specdec.clock.profiles import DeviceProfile, auto_profile
from specdec.gamma.chooser import (
    MAX_GAMMA,
    Choice,
    GammaChooser,
    Observed,
    can_resync,
    front_for,
    lru_reserve,
)
from specdec.gamma.shadows import ShadowReport, Shadows, divergence

if TYPE_CHECKING:  # the loader imports mlx-lm (seconds): not for `--help`
    from specdec.stream.loader import StreamedModel


@dataclass
class AutoGamma:
    sm: StreamedModel
    clock: PassClock
    profile: DeviceProfile  # what passes are priced on
    chooser: GammaChooser
    shadows: Shadows  # plain decoding's cache and each candidate γ's (specdec.gamma.shadows)

    @classmethod
    def build(
        cls, sm: StreamedModel, clock: PassClock, profiles: tuple[DeviceProfile, ...], seed: int
    ) -> AutoGamma:
        profile, note = auto_profile(profiles)
        if note:
            print(f"specdec: note: {note}", file=sys.stderr, flush=True)
        layers = sm.main_moe_layers
        s = sm.streamer
        slot = s.index.slot_bytes

        def cost(gamma, context, union, misses, d_union, d_misses) -> float:
            return clock.expected(
                profile, gamma, context, layers, union, misses, slot, d_union, d_misses
            )

        from specdec.stream.loader import build_cache  # here: it imports mlx-lm (seconds)

        shadows = Shadows(
            lambda: build_cache(sm.policy, s.cache.n_slots, sm.policy_options, s.key_stride),
            range(2, MAX_GAMMA + 1),
            seed,
            len(layers),
        )
        # lru_reserve's case is one cache over every expert (not a mixed pack's pools) read only
        # as the router asks (no lookahead)
        n = s.cache.n_slots
        one = isinstance(s.cache, ExpertCache) and not s.lookahead.ahead_of
        reserve = lru_reserve(sm.policy, n, len(layers), sm.top_k) if one else n
        # MTP's layer reads while drafting, unless wholly resident and never evicted: a cache
        # smaller than every block may evict its blocks for the main layers' (and a re-sync
        # drops them: plain never holds them)
        mtp = clock.mtp_layer
        evicts = n < s.index.n_blocks
        draft_slot = slot if mtp is not None and (evicts or not s.all_resident([mtp])) else 0.0
        chooser = GammaChooser(
            cost, len(layers), sm.top_k, slot, draft_slot, reserve, front_for(reserve),
            resync=one and can_resync(sm.policy, reserve),
            resync_s=lambda reads: resync_time(profile, reads, slot),
        )  # fmt: skip
        return cls(sm, clock, profile, chooser, shadows)

    def start(self) -> None:
        """After the prefill: plain decoding would start from the cache the prefill left (in
        its order, where the order is the policy's state: LRU)."""
        cache = self.sm.streamer.cache
        self.shadows.preload(cache.held_order() if self.chooser.resync else cache.resident_keys())

    def resync(self) -> list:
        """The run's cache takes plain's shadow's state (Choice.sync), reading what it lacks:
        the steps of those reads (streamer.LayerStep, phase "resync")."""
        self.sm.streamer.adopt(self.shadows.plain)
        return self.sm.streamer.drain()

    def choose(self, context: int, left: int) -> Choice:
        """`left`: the tokens the run still commits (it ends after them)."""
        return self.chooser.choose(context, left, ends=True)

    def observe(
        self,
        rec,  # the pass's decode.records.PassRecord
        calls: list,  # the pass's routed calls (decode.routing.RoutingRecorder)
        committed: int,
        context: int,
        **pass_cost,  # what PassClock.modeled takes of the pass (drafted, steps, refeed, ...)
    ) -> None:
        """Teach the chooser what the pass cost and what plain decoding would have read."""
        seen = self.shadows.feed(self._committed_keys(calls, committed), self.chooser.alphas())
        # the guard counts what the pass really cost (the record has it on a given profile)
        spent = rec.modeled_s.get(self.profile.name) or (
            self.clock.modeled(
                self.profile, context=context, measured_compute_s=0.0, **pass_cost
            ).total_s  # a roofline profile: measured compute not used
        )
        cold = self._cold(self.sm.streamer.cache.resident_keys())
        observed = self._observed(rec, seen, context, spent, cold)
        if self.chooser.tracks_divergence(cold):
            diverged, synced = divergence(self.sm.streamer.cache, self.shadows.plain)
            observed = dataclasses.replace(observed, diverged=diverged, synced=synced)
        self.chooser.observe(observed)

    def _cold(self, resident: list[int]) -> int:
        """Blocks of the main MoE layers not resident: the most a pass can miss there."""
        stride, layers = self.sm.streamer.key_stride, set(self.sm.main_moe_layers)
        index = self.sm.streamer.index
        held = sum(1 for key in resident if key // stride in layers)
        return sum(index.layers[lid].n_experts for lid in layers) - held

    def _committed_keys(self, calls: list, committed: int) -> np.ndarray:
        """[committed, L, k] cache keys of the committed tokens' verify routing (the shadows'
        input)."""
        rows: dict[int, list[np.ndarray]] = {}
        for layer, idx, phase in calls:
            if phase == "verify":
                rows.setdefault(layer, []).append(idx.reshape(-1, idx.shape[-1]))
        stride = self.sm.streamer.key_stride
        return np.stack(
            [
                np.concatenate(rows[lid])[:committed] + lid * stride
                for lid in self.sm.main_moe_layers
            ],
            axis=1,
        )  # [committed, L, k]

    def _observed(
        self, rec, seen: ShadowReport, context: int, seconds: float, cold: int
    ) -> Observed:
        """What the chooser learns from a pass, per main MoE layer in order; `seconds`: its
        modeled time on auto's profile (re-feed and unused draft forwards included)."""
        layers = [str(lid) for lid in self.sm.main_moe_layers]
        return Observed(
            gamma=rec.drafted + 1,
            accepted=rec.accepted,
            union=np.array([rec.union.get(lid, 0) for lid in layers], np.float64),  # [L]
            misses=np.array([rec.misses.get(lid, 0) for lid in layers], np.float64),  # [L]
            draft_union=float(sum(rec.draft_union.values())),
            draft_misses=float(rec.draft_misses),
            drafts=_drafts(rec),
            plain_misses=seen.plain_misses,
            shadow=seen.passes,
            context=context,
            spent=(float(rec.bytes_read), seconds),
            cold=cold,
        )


def _drafts(rec) -> np.ndarray | None:
    """[drafted, 2] each kept draft's (union, misses), in order, its steps as the clock splits
    them (`draft_parts`; None: no draft, or none logged)."""
    steps = rec.steps.get("draft") or []
    if not rec.drafted or not steps:
        return None
    parts = draft_parts(steps, rec.draft_forwards or rec.drafted)[: rec.drafted]
    return np.array([[sum(s[1] for s in own), sum(s[2] for s in own)] for own in parts], float)
