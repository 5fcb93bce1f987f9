"""The speculative decode loop over streamed experts: draft, verify the union, judge, record.

    run = Decode(sm, prompt_ids, drafter, DecodeConfig(gamma=4, max_tokens=128))
    for rec in run.passes():
        ...  # one PassRecord per verify pass
    run.generated  # every committed token after the prompt

One pass: the drafter proposes γ−1 tokens (its expert reads counted as the draft phase), then
one target forward over γ positions — the last committed token and the drafts — reads the union
of their experts through the cache (verify phase), the acceptance rule commits 1 + accepted
tokens, and the KV cache is trimmed past the rejected positions. The verify forward (and a
re-feed after a rollback) computes each position as one-token decoding does unless the config
asks for the family's native multi-token form (decode/verify_form.py). γ = 1 is plain decoding through
the same loop. The prompt's prefill is excluded from every pass record.

Plain greedy decoding (no drafter, γ = 1, temperature 0) is pipelined as mlx-lm's
`generate_step` is: token t+1's forward is built and started from token t's lazy argmax before t
is read, whenever that forward can need no read (every MoE layer wholly resident, so no layer
syncs on its router); its cache steps run deferred, after t's, so records stay per token (and
where every streamed expert is resident they are counted without reading the routing:
specdec.stream.streamer, counted steps). The
token after the prompt is picked as a decode step picks (`greedy_next`), and the first decode
forward starts before the prefill's clock stops, as generate_step samples token 1 on the device
and starts token 2 before it yields token 1: decode speed counts from the same point as
mlx-lm's, each side's first use of its decode kernels in its prefill.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import mlx.core as mx
import numpy as np

from specdec.clock.passes import PassClock
from specdec.clock.profiles import DeviceProfile
from specdec.core.errors import SpecdecError
from specdec.core.seed import check_seed
from specdec.decode.drafters import Drafter
from specdec.decode.records import PassRecord
from specdec.decode.rollback import CacheMark, check_speculation, roll_back
from specdec.decode.routing import RoutingRecorder
from specdec.decode.sampling import MIN_TEMP, Verdict, check_finite, judge, judge_greedy
from specdec.decode.state import (
    DecodeState,
    argmax_picks,
    begin_routing,
    feed,
    forward,
    forward_greedy,
    log_probs,
)
from specdec.decode.verify_form import VerifyForm
from specdec.gamma.chooser import MAX_GAMMA
from specdec.gamma.controller import AutoGamma
from specdec.gamma.draft_stop import MODES, DraftStops, StopMode
from specdec.gamma.spec import Gamma
from specdec.store.budget import peak_rss_bytes
from specdec.store.reader import READ_SPLIT
from specdec.stream.steplog import Call
from specdec.stream.streamer import Deferred

if TYPE_CHECKING:  # the loader imports mlx-lm (seconds): not for `--help`
    from specdec.stream.loader import StreamedModel


@dataclass(frozen=True)
class DecodeConfig:
    gamma: Gamma = Gamma(1)  # a fixed γ or auto (specdec.gamma.spec; an int is parsed here)
    max_tokens: int = 64
    temp: float = 0.0
    seed: int = 0
    # a drafter that routes its drafts (self): "stop" ends a draft early by that routing under
    # auto, "record" records its predicted reads (any γ) and never stops, "off" neither
    draft_stop: StopMode = "stop"
    # how a verify pass computes its positions (decode/verify_form.py): "decode" as one-token
    # decoding does, so greedy output equals plain greedy's; "native" as the family's own code
    verify_form: str = "decode"

    def __post_init__(self):
        object.__setattr__(self, "gamma", Gamma.parse(self.gamma))


def greedy_graph(st: DecodeState, token: mx.array) -> tuple[mx.array, mx.array, mx.array | None]:
    """One decode token's graph after `token` [1, 1], built and not started: the argmax [1, 1]
    as judge's greedy rule picks it, its log-probability [1] (a NaN logit makes its row NaN,
    log_probs' logsumexp, so a non-finite one means the logits are not finite, whichever index
    the argmax took), and the forward's deferred calls' routing joined (Deferred.join; None:
    fewer than two)."""
    begin_routing(st, 1)
    deferred = st.sm.streamer.deferred
    since = len(deferred)
    nxt, top = argmax_picks(log_probs(st.sm.model(token, cache=st.cache)))  # [1], [1]
    return nxt.reshape(1, 1), top, deferred.join(since)


def greedy_next(st: DecodeState, token: mx.array) -> tuple[mx.array, mx.array]:
    """greedy_graph's pick and log-probability, started; the routing with them, read to the
    host one read later (Streamer.catch_up)."""
    nxt, top, routing = greedy_graph(st, token)
    mx.async_eval(nxt, top, *([] if routing is None else [routing]))
    return nxt, top


def read_pick(nxt: mx.array, top: mx.array) -> int:
    """greedy_next's pick on the host, its log-probability checked finite (evaluated with it:
    one sync)."""
    y = nxt.item()
    check_finite(top.item())
    return y


PREFILL, DRAFT, VERIFY = Call("prefill"), Call("draft"), Call("verify")
ROLLBACK = Call("rollback")  # re-feeding the accepted prefix (decode/rollback.py)
PREFILL_STEP = 2048  # mlx-lm generate_step's prefill_step_size
HELD_TOKENS = 16  # pipelined greedy decoding: tokens whose deferred steps run together
HELD_CALLS = Deferred.BOUND // 2  # ... and at most this many calls, with the next token's
# plain greedy decoding where every expert is resident counts its steps (Streamer.counted);
# False: replays them from the routing read back (specdec.bench.loop_parts' `ours_replayed`)
COUNT_STEPS = True


class Clocks(NamedTuple):
    """Where a pass starts or ends (Decode._clocks): the readers' counters since they opened."""

    time: float  # perf_counter
    blocked_s: float  # time blocked on reads
    reads: int  # blocks read
    context: int  # positions in the KV cache (all but y)
    read_s: float  # time with reads in flight
    split: tuple[float, ...]  # thread-seconds in I/O, landing and waking (READ_SPLIT)


def prefill_head(st: DecodeState, want_hidden: bool) -> list[mx.array | None]:
    """The prompt fed as mlx-lm's `generate_step` feeds it, all but its last token: in chunks
    of PREFILL_STEP (the last token then goes alone, as the first pass's pick); each chunk's MTP
    state.

    A CPU-tuned BLAS (OpenBLAS) sums in an order that depends on a call's row count, so one call
    over the whole prompt leaves other bits in the KV cache and greedy tokens can part from
    mlx-lm's on some CPUs (seen on an Intel Xeon: token 24 of 40, resident model alone, no
    streaming)."""
    hidden = []
    head = st.tokens[:-1]
    for i in range(0, len(head), PREFILL_STEP):
        feed(st, head[i : i + PREFILL_STEP], want_hidden)
        hidden.append(st.hidden)
    return hidden


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """The objects alive when decoding starts (the loaded model, its tokenizer) left out of the
    collector's passes while it decodes, then handed back (garbage among them is collected
    later, not lost): a collection walks only what decoding allocates. Measured on the H200
    at full budget: 793 against 763 tok/s (docs/results/cuda.md)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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
        if cfg.max_tokens < 1:
            raise SpecdecError(
                f"max tokens must be >= 1 (got {cfg.max_tokens}): ask for at least one"
            )
        if not math.isfinite(cfg.temp) or cfg.temp < 0:
            raise SpecdecError(f"temperature must be a finite number >= 0 (got {cfg.temp})")
        if 0 < cfg.temp < MIN_TEMP:
            raise SpecdecError(
                f"temperature {cfg.temp!r} is below {MIN_TEMP:g}: give 0 for greedy decoding or "
                f"a temperature >= {MIN_TEMP:g}"
            )
        check_seed(cfg.seed)
        if cfg.draft_stop not in MODES:
            raise SpecdecError(f"draft stop {cfg.draft_stop!r}: use {', '.join(MODES)}")
        if not prompt:
            raise SpecdecError("the prompt is empty: give at least one token")
        self.form = VerifyForm.install(sm.model, cfg.verify_form)
        self.sm, self.drafter, self.cfg = sm, drafter, cfg
        self.profiles, self.eos_ids = profiles, eos_ids
        self.moe_layers = sm.main_moe_layers  # a property that builds a list: once, not a token
        drafts = drafter.name != "none"  # nothing to draft: plain decoding, whatever γ says
        auto = cfg.gamma.auto and drafts
        # the fixed γ (1 where nothing drafts: a pass verifies one position, and its record
        # says so); auto's passes choose their own
        self.gamma = (cfg.gamma.fixed or 1) if drafts else 1
        check_speculation(sm, MAX_GAMMA if auto else self.gamma)
        from mlx_lm.models.cache import (
            make_prompt_cache,
        )  # here: mlx-lm takes seconds to import (--help)

        cache = make_prompt_cache(sm.model)
        self.st = DecodeState(
            sm, cache, list(prompt), len(prompt), cfg.temp, np.random.default_rng(cfg.seed)
        )
        self.prefill_s = 0.0
        self.discarded = 0  # forwards run past an EOS and dropped (pipelined greedy decoding)
        self.clock = (
            PassClock.for_decode(sm, drafter, cfg.verify_form) if profiles or auto else None
        )
        self.auto = AutoGamma.build(sm, self.clock, profiles, cfg.seed) if auto else None
        self.chooser = self.auto.chooser if auto else None
        routes = drafter.routes_drafts
        self.stops = DraftStops.build(sm, self.chooser, cfg.draft_stop) if routes else None

    @property
    def generated(self) -> list[int]:
        return self.st.generated

    def generated_since(self, n: int) -> list[int]:
        return self.st.generated_since(n)

    @property
    def n_generated(self) -> int:
        return self.st.n_generated

    def passes(self) -> Iterator[PassRecord]:
        with _heap_frozen():
            yield from self._passes()

    def _passes(self) -> Iterator[PassRecord]:
        st, cfg, drafter = self.st, self.cfg, self.drafter
        streamer = self.sm.streamer
        t0 = time.perf_counter()
        streamer.cache.new_sequence()  # a prefill from position 0: hotness restarts (as ds4)
        plain_greedy = self.gamma == 1 and cfg.temp == 0 and drafter.name == "none"
        with streamer.serving(PREFILL):
            y, picked = self._first_pick() if plain_greedy else (self._first_judged(), None)
        st.tokens.append(y)
        drafter.start(st)
        streamer.drain()
        if plain_greedy:
            # mlx-lm's generate_step starts token 2's forward on its device pick before it
            # yields token 1, so its decode time (after token 1) leaves out building that
            # first decode graph and, in a fresh process, compiling its kernels: ours starts
            # it the same way, on the pick as every later decode forward is fed (uint32 on the
            # device, not the host's int32, whose embedding gather is another kernel: fed the
            # host's pick, an H100's first decode token took 15.5-16.8 ms against mlx-lm's
            # ~1 ms; fed the device's, 1.6-2.4 ms in the thirtieth session: docs/results/cuda.md)
            # every expert resident: each token's steps counted, not replayed (Streamer.counted)
            with streamer.counted(self.sm.family.distinct_picks and COUNT_STEPS):
                started = self._start_next(picked) if self._continues(y) else None
                self.prefill_s = time.perf_counter() - t0
                yield from self._greedy_passes(started)
            return
        self.prefill_s = time.perf_counter() - t0
        if self.auto:
            self.auto.start()
        # auto's shadows and the draft stop read the pass's routing here
        self.tap = RoutingRecorder() if self.chooser or self.stops else None
        watch = streamer.log.watching(self.tap) if self.tap else contextlib.nullcontext()
        with watch:
            yield from self._spec_passes(y)

    def _first_judged(self) -> int:
        """The prompt fed; the token after it judged as a verify pass's (`_verify`: greedy
        picks on the device, the kernels a verify adds first used here, in the prefill)."""
        st, want_hidden = self.st, self.drafter.needs_hidden
        hidden = prefill_head(st, want_hidden)
        verdict = self._verify(st.tokens[-1:], [], None)
        if want_hidden and hidden:
            st.hidden = mx.concatenate([*hidden, st.hidden], axis=1)  # [1, P, H]
        return verdict.tokens[0]

    def _first_pick(self) -> tuple[int, mx.array]:
        """The prompt fed; the token after it picked as a plain greedy decode step picks
        (`greedy_next`: the same rule on the device), as generate_step samples its first token:
        the pick on the host, and on the device [1, 1], which token 2's forward is fed as every
        later decode forward is (`_passes`)."""
        prefill_head(self.st, False)
        nxt, top = greedy_next(self.st, mx.array([self.st.tokens[-1:]]))
        return read_pick(nxt, top), nxt

    def _spec_passes(self, y: int) -> Iterator[PassRecord]:
        """Draft, verify, judge; one record per pass."""
        st, cfg, drafter, streamer = self.st, self.cfg, self.drafter, self.sm.streamer
        n_pass = 0
        while self._continues(y):
            if self.tap:
                self.tap.calls.clear()  # one pass's calls at a time
            start = self._clocks()
            left = cfg.max_tokens - st.n_generated  # the last pass drafts no further
            chosen = time.perf_counter()
            choice = self.auto.choose(len(st.tokens) - 1, left) if self.auto else None
            choose_s = time.perf_counter() - chosen
            gamma = choice.gamma if choice else self.gamma
            resync = self.auto.resync() if choice and choice.sync else []
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
            if streamer.route_override is not None and drafter.planned is not None:
                streamer.route_override.planned = drafter.planned + 1  # y and the right drafts
            with streamer.serving(VERIFY), self.form.verifying():
                verdict = self._verify([y, *drafts], drafts, q)
            verify_steps = streamer.drain()
            keep = [y, *drafts[: verdict.accepted]]
            # the cache back past rejected drafts; a re-feed is positions decoding fed one by one
            with streamer.serving(ROLLBACK), self.form.verifying():
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
                resync_steps=resync,
            )
            if stop:
                rec.draft_routing = stop.record(self.tap.calls, len(drafts) + 1)
            if choice:
                rec.gamma_choice, rec.choose_s = choice.record(), choose_s
                books = time.perf_counter()
                self.auto.observe(
                    rec,
                    self.tap.calls,
                    len(tokens),
                    start.context,
                    drafted=len(drafts),
                    draft_forwards=forwards,
                    draft_steps=draft_steps,
                    verify_steps=verify_steps,
                    refeed=(refed, refeed_steps),
                    resync_steps=resync,
                )
                # between this pass's clock and the next's: the run's time all the same
                rec.add_books(time.perf_counter() - books)
            yield rec
            n_pass += 1

    def _verify(self, tokens: list[int], drafts: list[int], q) -> Verdict:
        """The verify forward over `tokens` and its verdict on `drafts`: greedy from each
        position's pick alone (state.forward_greedy: 2·γ values reach the host), sampled from
        the log-probabilities [γ, V]."""
        st, cfg, hidden = self.st, self.cfg, self.drafter.needs_hidden
        if cfg.temp == 0:
            return judge_greedy(drafts, *forward_greedy(st, tokens, hidden))
        return judge(drafts, q, forward(st, tokens, hidden), cfg.temp, st.rng)

    def _continues(self, y: int) -> bool:
        """Whether decoding goes on after the committed token y."""
        return self.st.n_generated < self.cfg.max_tokens and y not in self.eos_ids

    def _next(self, token: mx.array) -> tuple[mx.array, mx.array]:
        """greedy_next as a verify forward."""
        with self.sm.streamer.serving(VERIFY):
            return greedy_next(self.st, token)

    def _start_next(self, token: mx.array) -> tuple[mx.array, mx.array] | None:
        """Token t+1's forward on `token` [1, 1] (lazy), started, where it can need no read
        (every MoE layer wholly resident, so no layer syncs on its router); else None."""
        return self._next(token) if self.sm.streamer.all_resident(self.moe_layers) else None

    def _greedy_passes(self, started: tuple[mx.array, mx.array] | None) -> Iterator[PassRecord]:
        """Plain greedy decoding, pipelined across tokens where no read can be pending:
        `started`, token 2's forward when prefill started it.

        Where the cache holds every expert (no slot is ever refilled, so every call of a
        pipelined token is deferred), the deferred steps of up to HELD_TOKENS tokens (fewer on
        deep models: HELD_CALLS) run together, inside the last one's time, and their records
        are yielded after: the first host read of a token's routing waits for the forward
        started behind it (on the H200 ~150 µs a token, docs/results/cuda.md), once per batch
        instead of once per token. Each token keeps its own record and steps. Where every
        streamed expert is resident too, its steps are counted, not replayed: no routing is
        joined or read (Streamer.counted; `_passes` sets it)."""
        st, cfg, streamer = self.st, self.cfg, self.sm.streamer
        hold = streamer.source.holds_all
        most = max(1, min(HELD_TOKENS, HELD_CALLS // max(1, len(self.moe_layers))))
        held: list[tuple[int, int, int, Clocks, Clocks | None]] = []  # n_pass, y, calls, start, end
        y = st.tokens[-1]
        n_pass = 0
        while self._continues(y):
            start = self._clocks()
            pipelined = hold and started is not None  # all its calls deferred
            # not started ahead on the synced path: each MoE layer reads what it misses
            nxt, top = started or self._next(mx.array([[y]]))
            # this token's deferred calls: after the held tokens', before the next token's
            mine = len(streamer.deferred) - sum(h[2] for h in held)
            last = st.n_generated + 1 >= cfg.max_tokens
            started = None if last else self._start_next(nxt)
            y = read_pick(nxt, top)  # host sync: token t (t+1 computes meanwhile)
            st.tokens.append(y)
            n_pass += 1
            if pipelined and len(held) + 1 < most and self._continues(y):
                held.append((n_pass - 1, y, mine, start, self._clocks()))  # record: steps first
                continue
            held.append((n_pass - 1, y, mine, start, None))  # ends when its record is built
            # in call order, as the synced path; all built before any is yielded, so the last
            # one's time holds the batch's host work and none of the caller's
            recs = [
                self._record(i, [], 0, [y_i], [], streamer.drain(mine_i), start_i, end=end_i)
                for i, y_i, mine_i, start_i, end_i in held
            ]
            held = []
            yield from recs
        if started is not None:  # computed past an EOS: its steps never happen
            streamer.deferred.clear()
            self.discarded = 1
            from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

            if can_trim_prompt_cache(st.cache):
                trim_prompt_cache(st.cache, 1)

    def _clocks(self) -> Clocks:
        """Where a pass starts (or ends)."""
        stats = self.sm.streamer.reader.stats
        return Clocks(
            time.perf_counter(),
            stats.blocked_s,
            stats.reads,
            len(self.st.tokens) - 1,
            stats.read_s,
            stats.split(),
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
        end=None,
        resync_steps=(),
    ):
        """The pass's record; `start`: `_clocks()` when the pass began; `refeed`: positions fed
        again after a rollback (rollback.py) and their steps; `gamma` as configured (auto: as
        chosen; the last pass may draft fewer); `draft_forwards`: forwards the draft ran (a
        draft stop runs more than it keeps; None: one per draft). Every pass ends here, once its
        verdict is known: the cache hears it first (speculation-aware options). `end`:
        `_clocks()` when the pass ended, if not now (a held token, `_greedy_passes`);
        `resync_steps`: `--gamma auto`'s re-sync before the pass (AutoGamma.resync)."""
        self.sm.streamer.cache.verdict(accepted)
        end = end or self._clocks()
        wall, context = end.time - start.time, start.context
        blocked, reads = end.blocked_s - start.blocked_s, end.reads - start.reads
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
                resync_steps=resync_steps,
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
            read_s=end.read_s - start.read_s,
            read_split={
                n: b - a for n, a, b in zip(READ_SPLIT, start.split, end.split, strict=True)
            },
            peak_rss_bytes=peak_rss_bytes(),
            context=context,
            draft_forwards=draft_forwards,
            resync_steps=list(resync_steps),
        )
