"""The speculative decode loop over streamed experts: draft, verify the union, judge, record.

    run = Decode(sm, prompt_ids, drafter, DecodeConfig(gamma=4, max_tokens=128))
    for rec in run.passes():
        ...  # one PassRecord per verify pass
    run.generated  # every committed token after the prompt

One pass: the drafter proposes γ−1 tokens (its expert reads counted as the draft phase), then
one target forward over γ positions — the last committed token and the drafts — reads the union
of their experts through the cache (verify phase), the acceptance rule commits 1 + accepted
tokens, and the KV cache is trimmed past the rejected positions. γ = 1 is plain decoding through
the same loop. The prompt's prefill is excluded from every pass record.

Plain greedy decoding (no drafter, γ = 1, temperature 0) is pipelined as mlx-lm's
`generate_step` is: token t+1's forward is built and started from token t's lazy argmax before t
is read, whenever that forward can need no read (every MoE layer wholly resident, so no layer
syncs on its router); its cache steps run deferred, after t's, so records stay per token.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from specdec.clock.passes import PassClock
from specdec.clock.profiles import DeviceProfile, auto_profile
from specdec.core.errors import SpecdecError
from specdec.decode.drafters import Drafter
from specdec.decode.records import PassRecord
from specdec.decode.rollback import CacheMark, check_speculation, roll_back
from specdec.decode.routing import RoutingRecorder
from specdec.decode.sampling import judge
from specdec.decode.state import DecodeState, forward
from specdec.gamma.chooser import AUTO, MAX_GAMMA, Gamma, GammaChooser, Observed
from specdec.gamma.draft_stop import MODES, DraftStops, StopMode
from specdec.gamma.shadows import ShadowReport, Shadows
from specdec.store.budget import peak_rss_bytes
from specdec.stream.loader import StreamedModel, build_cache
from specdec.stream.steplog import Call


@dataclass(frozen=True)
class DecodeConfig:
    gamma: Gamma = 1  # an int, or "auto" (specdec.gamma.chooser, parsed at the edge)
    max_tokens: int = 64
    temp: float = 0.0
    seed: int = 0
    # a drafter that routes its drafts (self): "stop" ends a draft early by that routing under
    # auto, "record" records its predicted reads (any γ) and never stops, "off" neither
    draft_stop: StopMode = "stop"


def greedy_next(st: DecodeState, token: mx.array) -> mx.array:
    """The argmax after `token` [1, 1] (lazy, started), as judge's greedy rule picks it."""
    logits = st.sm.model(token, cache=st.cache)  # [1, 1, V]
    nxt = mx.argmax(logits[0, -1].astype(mx.float32)).reshape(1, 1)
    mx.async_eval(nxt)
    return nxt


PREFILL, DRAFT, VERIFY = Call("prefill"), Call("draft"), Call("verify")
ROLLBACK = Call("rollback")  # re-feeding the accepted prefix (decode/rollback.py)
PREFILL_STEP = 2048  # mlx-lm generate_step's prefill_step_size


def prefill(st: DecodeState, want_hidden: bool) -> np.ndarray:
    """The prompt fed as mlx-lm's `generate_step` feeds it; returns the last position's logits.

    All but the last token go in chunks of PREFILL_STEP, then the last token alone. A CPU-tuned
    BLAS (OpenBLAS) sums in an order that depends on a call's row count, so one call over the
    whole prompt leaves other bits in the KV cache and greedy tokens can part from mlx-lm's on
    some CPUs (seen on an Intel Xeon: token 24 of 40, resident model alone, no streaming).
    """
    hidden = []
    head = st.tokens[:-1]
    for i in range(0, len(head), PREFILL_STEP):
        forward(st, head[i : i + PREFILL_STEP], want_hidden)
        hidden.append(st.hidden)
    logits = forward(st, st.tokens[-1:], want_hidden)  # [1, V]
    if want_hidden and hidden:
        st.hidden = mx.concatenate([*hidden, st.hidden], axis=1)  # [1, P, H]
    return logits


class Decode:
    """One generation: `passes()` yields a PassRecord per verify pass; `generated` the tokens."""

    def __init__(
        self,
        sm: StreamedModel,
        prompt: list[int],
        drafter: Drafter,
        cfg: DecodeConfig,
        profiles: tuple[DeviceProfile, ...] = (),
        eos_ids: frozenset[int] = frozenset(),
    ):
        if cfg.gamma != AUTO and (not isinstance(cfg.gamma, int) or cfg.gamma < 1):
            raise SpecdecError(f"gamma must be >= 1 (got {cfg.gamma}); gamma = 1 is plain decoding")
        if cfg.max_tokens < 1:
            raise SpecdecError(
                f"max tokens must be >= 1 (got {cfg.max_tokens}): ask for at least one"
            )
        if not math.isfinite(cfg.temp) or cfg.temp < 0:
            raise SpecdecError(f"temperature must be a finite number >= 0 (got {cfg.temp})")
        if cfg.seed < 0:
            raise SpecdecError(f"seed must be >= 0 (got {cfg.seed})")
        if cfg.draft_stop not in MODES:
            raise SpecdecError(f"draft stop {cfg.draft_stop!r}: use {', '.join(MODES)}")
        if not prompt:
            raise SpecdecError("the prompt is empty: give at least one token")
        self.sm, self.drafter, self.cfg = sm, drafter, cfg
        self.profiles, self.eos_ids = profiles, eos_ids
        auto = cfg.gamma == AUTO and drafter.name != "none"  # nothing to draft: plain decoding
        self.gamma = 1 if cfg.gamma == AUTO and not auto else cfg.gamma
        check_speculation(sm, MAX_GAMMA if auto else self.gamma)
        cache = make_prompt_cache(sm.model)
        self.st = DecodeState(
            sm, cache, list(prompt), len(prompt), cfg.temp, np.random.default_rng(cfg.seed)
        )
        self.prefill_s = 0.0
        self.discarded = 0  # forwards run past an EOS and dropped (pipelined greedy decoding)
        self.clock = PassClock.for_decode(sm, drafter) if profiles or auto else None
        self.chooser = self._chooser() if auto else None
        routes = drafter.routes_drafts
        self.stops = DraftStops.build(sm, self.chooser, cfg.draft_stop) if routes else None

    def _chooser(self) -> GammaChooser:
        """`--gamma auto`: costs passes on the first roofline profile given, else DEFAULT_PROFILE
        (`auto_profile`; a note on stderr says so when none given is roofline)."""
        profile, note = auto_profile(self.profiles)
        if note:
            print(f"specdec: note: {note}", file=sys.stderr, flush=True)
        self.auto_profile = profile
        layers = self.sm.main_moe_layers
        slot = self.sm.streamer.index.slot_bytes

        def cost(gamma, context, union, misses, d_union, d_misses) -> float:
            return self.clock.expected(
                profile, gamma, context, layers, union, misses, slot, d_union, d_misses
            )

        s = self.sm.streamer  # the shadows: plain's and each γ's cache (specdec.gamma.shadows)
        self.shadows = Shadows(
            lambda: build_cache(self.sm.policy, s.cache.n_slots, self.sm.policy_options,
                                s.key_stride),
            range(2, MAX_GAMMA + 1),
            self.cfg.seed,
        )  # fmt: skip
        mtp = self.clock.mtp_layer  # MTP's layer reads while drafting, unless wholly resident
        draft_slot = slot if mtp is not None and not s.all_resident([mtp]) else 0.0
        return GammaChooser(cost, len(layers), self.sm.top_k, slot, draft_slot)

    @property
    def generated(self) -> list[int]:
        return self.st.generated

    def passes(self) -> Iterator[PassRecord]:
        st, cfg, drafter = self.st, self.cfg, self.drafter
        streamer = self.sm.streamer
        t0 = time.perf_counter()
        streamer.cache.new_sequence()  # a prefill from position 0: hotness restarts (as ds4)
        with streamer.serving(PREFILL):
            logits = prefill(st, drafter.needs_hidden)
            y = judge([], None, logits, cfg.temp, st.rng).tokens[0]
        st.tokens.append(y)
        drafter.start(st)
        streamer.drain()
        self.prefill_s = time.perf_counter() - t0
        if self.gamma == 1 and cfg.temp == 0 and drafter.name == "none":
            yield from self._greedy_passes(y)
            return
        if self.chooser:  # plain decoding would start from the cache the prefill left
            self.shadows.preload(streamer.cache.resident_keys())
        # auto's shadows and the draft stop read the pass's routing here
        self.tap = RoutingRecorder() if self.chooser or self.stops else None
        watch = streamer.log.watching(self.tap) if self.tap else contextlib.nullcontext()
        with watch:
            yield from self._spec_passes(y)

    def _spec_passes(self, y: int) -> Iterator[PassRecord]:
        """Draft, verify, judge; one record per pass."""
        st, cfg, drafter, streamer = self.st, self.cfg, self.drafter, self.sm.streamer
        n_pass = 0
        while len(st.generated) < cfg.max_tokens and y not in self.eos_ids:
            if self.tap:
                self.tap.calls.clear()  # one pass's calls at a time
            start = self._clocks()
            left = cfg.max_tokens - len(st.generated)  # the last pass drafts no further
            choice = self.chooser.choose(len(st.tokens) - 1, left) if self.chooser else None
            gamma = choice.gamma if choice else self.gamma
            n = min(gamma, left) - 1
            stop = (
                self.stops.begin(choice, gamma, len(st.tokens) - 1, self.tap.calls)
                if (self.stops and n > 0)
                else None
            )
            with streamer.serving(DRAFT):
                drafts, q = drafter.propose(st, n, stop) if stop else drafter.propose(st, n)
            draft_steps = streamer.drain()
            mark = CacheMark.before(st.cache)  # None unless a layer's state cannot be trimmed
            with streamer.serving(VERIFY):
                logits = forward(st, [y, *drafts], drafter.needs_hidden)  # [γ, V]
            verify_steps = streamer.drain()
            verdict = judge(drafts, q, logits, cfg.temp, st.rng)
            keep = [y, *drafts[: verdict.accepted]]
            with streamer.serving(ROLLBACK):  # the cache back past rejected drafts
                refed = roll_back(st, mark, len(drafts) + 1, keep, drafter.needs_hidden)
            refeed_steps = streamer.drain()
            drafter.commit(st, drafts, verdict)
            tokens = verdict.tokens  # at most the tokens left: drafts were capped above
            if self.eos_ids & set(tokens):
                tokens = tokens[: next(i for i, t in enumerate(tokens) if t in self.eos_ids) + 1]
            st.tokens += tokens
            y = tokens[-1]
            forwards = stop.steps if stop else len(drafts)
            rec = self._record(
                n_pass,
                drafts,
                verdict.accepted,
                tokens,
                draft_steps,
                verify_steps,
                start,
                (refed, refeed_steps),
                gamma,
                forwards,
            )
            if stop:
                rec.draft_routing = stop.record(self.tap.calls, len(drafts) + 1)
            if choice:
                rec.gamma_choice = choice.record()
                seen = self.shadows.feed(
                    self._committed_keys(self.tap.calls, len(tokens)), self.chooser.alphas()
                )
                # the guard counts what the pass really cost (the record has it on a given profile)
                spent = (
                    rec.modeled_s.get(self.auto_profile.name)
                    or self.clock.modeled(
                        self.auto_profile,
                        drafted=len(drafts),
                        draft_forwards=forwards,
                        context=start[3],
                        draft_steps=draft_steps,
                        verify_steps=verify_steps,
                        measured_compute_s=0.0,  # a roofline profile: not used
                        refeed=(refed, refeed_steps),
                    ).total_s
                )
                self.chooser.observe(self._observed(rec, seen, start[3], spent))
            yield rec
            n_pass += 1

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
        self, rec: PassRecord, seen: ShadowReport, context: int, seconds: float
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
            plain_misses=seen.plain_misses,
            shadow=seen.passes,
            context=context,
            spent=(float(rec.bytes_read), seconds),
        )

    def _greedy_passes(self, y: int) -> Iterator[PassRecord]:
        """Plain greedy decoding, pipelined across tokens where no read can be pending."""
        st, cfg, streamer = self.st, self.cfg, self.sm.streamer
        layers = self.sm.main_moe_layers
        started = None  # [1, 1] the next token, computing
        n_pass = 0
        while len(st.generated) < cfg.max_tokens and y not in self.eos_ids:
            start = self._clocks()
            with streamer.serving(VERIFY):
                nxt = started if started is not None else greedy_next(st, mx.array([[y]]))
                mine = len(streamer.deferred)  # this token's deferred calls; the next's follow
                last = len(st.generated) + 1 >= cfg.max_tokens
                started = (
                    None if last or not streamer.all_resident(layers) else greedy_next(st, nxt)
                )
            y = nxt.item()  # host sync: token t (t+1 computes meanwhile)
            st.tokens.append(y)
            steps = streamer.drain(mine)
            yield self._record(n_pass, [], 0, [y], [], steps, start)
            n_pass += 1
        if started is not None:  # computed past an EOS: its steps never happen
            streamer.deferred.clear()
            self.discarded = 1
            if can_trim_prompt_cache(st.cache):
                trim_prompt_cache(st.cache, 1)

    def _clocks(self) -> tuple[float, float, int, int, float]:
        """Where a pass starts: time, blocked time, reads, positions in the KV cache (all but y),
        time with reads in flight."""
        stats = self.sm.streamer.reader.stats
        return (
            time.perf_counter(),
            stats.blocked_s,
            stats.reads,
            len(self.st.tokens) - 1,
            stats.read_s,
        )

    def _record(
        self,
        n_pass,
        drafts,
        accepted,
        tokens,
        draft_steps,
        verify_steps,
        start,
        refeed=(0, []),
        gamma=1,
        draft_forwards=None,
    ):
        """The pass's record; `start`: `_clocks()` when the pass began; `refeed`: positions fed
        again after a rollback (rollback.py) and their steps; `gamma` as configured (auto: as
        chosen; the last pass may draft fewer); `draft_forwards`: forwards the draft ran (a
        draft stop runs more than it keeps; None: one per draft). Every pass ends here, once its
        verdict is known: the cache hears it first (speculation-aware options)."""
        self.sm.streamer.cache.verdict(accepted)
        stats = self.sm.streamer.reader.stats
        t0, blocked0, reads0, context, read_s0 = start
        wall = time.perf_counter() - t0
        blocked, reads = stats.blocked_s - blocked0, stats.reads - reads0
        modeled = {
            p.name: self.clock.modeled(
                p,
                drafted=len(drafts),
                draft_forwards=draft_forwards,
                context=context,
                draft_steps=draft_steps,
                verify_steps=verify_steps,
                measured_compute_s=wall - blocked,
                refeed=refeed,
            )
            for p in self.profiles
        }
        return PassRecord.build(
            n_pass,
            gamma,
            drafted=len(drafts),
            accepted=accepted,
            tokens=tokens,
            draft_steps=draft_steps,
            verify_steps=verify_steps,
            refeed=refeed,
            wall_s=wall,
            blocked_s=blocked,
            reads=reads,
            modeled=modeled,
            read_s=stats.read_s - read_s0,
            peak_rss_bytes=peak_rss_bytes(),
        )
