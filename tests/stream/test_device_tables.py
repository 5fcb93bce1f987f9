"""Wholly resident layers run on device slot tables without a host sync, and nothing else changes.

Each case runs the same work twice on a real random checkpoint: with device tables (layers whose
every expert is resident skip the router's host read and run their cache step after the token)
and with them off (every layer syncs, the reference path). Tokens, logits, the step log, every
cache counter and the recorder's calls must be equal; and the device run must really have
skipped the syncs it claims to skip. Where every expert is resident, plain greedy decoding
counts its steps instead of replaying them: the same records and counters, no routing read.
"""

from __future__ import annotations

import dataclasses
import time

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specdec.core.errors import BudgetError, SpecdecError
from specdec.decode import loop as loop_module
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import HELD_TOKENS, Decode, DecodeConfig
from specdec.decode.run import generate
from specdec.stream import streamer as streamer_module
from specdec.stream.loader import load
from specdec.stream.streamed import StreamedSwitchGLU
from specdec.stream.streamer import Streamer
from tests.helpers import pinned_stand_in, random_checkpoint, resident_logits


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return random_checkpoint(tmp_path_factory.mktemp("tables"), "qwen3_moe", 4)


@pytest.fixture
def syncs(monkeypatch):
    """Counts host reads of a router's choice (Streamer.sync calls)."""
    n = [0]
    inner = Streamer.sync

    def counted(self, indices, ahead):
        n[0] += 1
        return inner(self, indices, ahead)

    monkeypatch.setattr(Streamer, "sync", counted)
    return n


def _decode(sm, prompt, drafter="none", gamma=1, n=24, eos=frozenset()):
    """Tokens, records (steps and counts) and recorder calls of one decode."""
    seen = []
    run = Decode(sm, prompt, DrafterSpec.parse(drafter).build(sm), DecodeConfig(gamma, n), (), eos)
    keep = ("tokens", "union", "misses", "draft_union", "accesses", "hits", "reads")
    with sm.streamer.log.watching(
        lambda layer, idx, phase: seen.append((layer, idx.tolist(), phase))
    ):
        recs = [[getattr(r, k) for k in keep] + [r.verify_bytes_read] for r in run.passes()]
    return run.generated, recs, seen, sm.streamer.cache.stats()


def _both(ckpt, fn, **load_kw):
    out = []
    for tables in (True, False):
        sm = load(ckpt, io="buffered", with_mtp=False, **load_kw)
        sm.streamer.source.device_tables = tables
        try:
            out.append(fn(sm))
        finally:
            sm.close()
    return out


@pytest.mark.parametrize("drafter,gamma", [("none", 1), ("lookup", 3)])
def test_warm_full_budget_needs_no_sync_and_keeps_stats(ckpt, syncs, drafter, gamma):
    prompt = list(range(40, 56))
    dev, ref = _both(ckpt, lambda sm: _decode(sm, prompt, drafter, gamma), budget="100%", warm=True)
    assert dev == ref
    assert syncs[0] == len(ref[2]), "the reference path syncs once per routed call"
    assert dev[3]["misses"] == 0 and dev[3]["hits"] > 0


def test_cache_holding_every_expert_tracks_nothing(ckpt):
    """Full budget: no slot is ever refilled, so no MoE output is tracked or started early (the
    token is one graph, evaluated once); below it, outputs on slots are tracked."""
    prompt = list(range(40, 56))
    for budget, warm, holds in (("100%", True, True), ("50%", False, False)):
        sm = load(ckpt, io="buffered", with_mtp=False, budget=budget, warm=warm)
        try:
            src = sm.streamer.source
            assert src.holds_all is holds
            _decode(sm, prompt, n=8)
            assert (src.pending == []) is holds
        finally:
            sm.close()


def test_deferred_steps_stay_bounded_without_a_drain_at_full_budget(ckpt):
    """Model calls with no drain between (probes): the deferred host steps are caught up past
    1024 even where the cache holds every expert and no output is tracked."""
    sm = load(ckpt, io="buffered", with_mtp=False, budget="100%", warm=True)
    try:
        cache = make_prompt_cache(sm.model)
        for t in range(2048 // len(sm.main_moe_layers)):  # 2048 deferred steps without a bound
            sm.model(mx.array([[t % 500]]), cache=cache)
        assert sm.streamer.source.holds_all and len(sm.streamer.deferred) <= 1024
    finally:
        sm.close()


def test_lookahead_whose_target_is_resident_is_skipped(ckpt, syncs):
    prompt = list(range(40, 56))
    kw = {"budget": "100%", "warm": True, "lookahead": 2}
    dev, ref = _both(ckpt, lambda sm: _decode(sm, prompt), **kw)
    assert dev == ref
    assert syncs[0] == len(ref[2])  # all of them the reference run's


def test_eos_past_a_pipelined_token_leaves_no_steps(ckpt):
    """The token computed after an EOS (pipelined) never reaches the cache or the records."""
    prompt = list(range(40, 56))
    tokens = _both(ckpt, lambda sm: _decode(sm, prompt)[0], budget="100%", warm=True)[0]
    eos = frozenset([tokens[6]])
    dev, ref = _both(ckpt, lambda sm: _decode(sm, prompt, eos=eos), budget="100%", warm=True)
    assert dev == ref
    assert len(dev[0]) == tokens.index(tokens[6]) + 1


@pytest.mark.parametrize("budget,warm,started", [("100%", True, True), ("50%", False, False)])
def test_first_decode_forward_starts_before_the_first_pass_is_timed(
    ckpt, monkeypatch, budget, warm, started
):
    """As mlx-lm's generate_step (token 2's forward started before token 1 is yielded), the
    pipelined path starts the first decode forward in the prefill's time: when the first pass's
    clock starts its MoE calls are already built (deferred); the synced path starts nothing."""
    at_clock = []
    inner = Decode._clocks

    def clocks(self):
        at_clock.append(len(self.sm.streamer.deferred))
        return inner(self)

    monkeypatch.setattr(Decode, "_clocks", clocks)
    sm = load(ckpt, io="buffered", with_mtp=False, budget=budget, warm=warm)
    try:
        tokens, recs = _decode(sm, list(range(40, 56)), n=6)[:2]
    finally:
        sm.close()
    assert len(tokens) == 6 and len(recs) == 5  # one pass a token after the first
    assert at_clock[0] == (len(sm.main_moe_layers) if started else 0)


def test_held_tokens_run_their_steps_together(ckpt, monkeypatch):
    """Where the cache holds every expert, the deferred steps of HELD_TOKENS pipelined tokens
    run together (one wait for the forward started behind them, not one a token), inside the
    last one's time, none of the caller's; each token keeps its own record and its own steps."""
    bursts = []
    inner = Streamer.catch_up

    def catch_up(self, n=None):
        bursts.append(len(run.generated))
        return inner(self, n)

    monkeypatch.setattr(Streamer, "catch_up", catch_up)
    sm = load(ckpt, io="buffered", with_mtp=False, budget="100%", warm=True)
    try:
        layers = sm.main_moe_layers
        run = Decode(
            sm, list(range(40, 56)), DrafterSpec.parse("none").build(sm), DecodeConfig(1, 24)
        )
        recs, t0 = [], time.perf_counter()
        for r in run.passes():  # a slow caller: its time is in no pass's wall
            recs.append(r)
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
    finally:
        sm.close()
    assert len(recs) == 23 and [r.pass_idx for r in recs] == list(range(23))
    assert [r.tokens[0] for r in recs] == run.generated[1:]
    assert all(sorted(map(int, r.union)) == layers for r in recs)  # each its own steps
    top_k = sm.model.args.num_experts_per_tok
    assert all(r.accesses == r.hits == len(layers) * top_k for r in recs)  # all hits
    # the prefill's drain, then 16 tokens together, then the last 7
    assert sorted(set(bursts)) == [1, 1 + HELD_TOKENS, 24]
    walls = [r.wall_s for r in recs]
    assert all(w > 0 for w in walls) and sum(walls) < elapsed - 0.9 * 0.01 * len(recs)


def test_pinned_layer_runs_on_its_table_among_synced_layers(ckpt, syncs):
    """static pins one whole layer; its wide prefill call is chunked by scratch in the replay."""

    def run(sm):
        cache = make_prompt_cache(sm.model)
        seen = []
        with sm.streamer.log.watching(lambda layer, idx, phase: seen.append((layer, idx.tolist()))):
            logits = [resident_logits(sm.model, list(range(30, 46)), cache)]
            for t in (5, 9, 300, 7):
                logits.append(resident_logits(sm.model, [t], cache))
        steps = [(s.layer, s.union, s.misses, s.bytes_read) for s in sm.streamer.drain()]
        return np.concatenate(logits), steps, seen, sm.streamer.cache.stats()

    hot = [(1, e) for e in range(16)]  # every expert of MoE layer 1
    kw = {"budget": "24slots", "policy": "static"}
    dev, ref = _both(ckpt, run, policy_options={"hotlist": hot, "scratch": 8}, **kw)
    assert np.array_equal(dev[0], ref[0])
    assert dev[1:] == ref[1:]
    assert sum(1 for s in ref[1] if s[0] == 1) > 5  # the 16-position prefill went in chunks
    layer1 = sum(1 for layer, _ in ref[2] if layer == 1)
    assert layer1 == 5 and syncs[0] == 2 * len(ref[2]) - layer1  # layer 1 never synced


def test_warm_needs_a_budget_that_holds_every_expert(ckpt):
    with pytest.raises(BudgetError, match="--warm"):
        load(ckpt, budget="50%", io="buffered", with_mtp=False, warm=True)


@pytest.mark.parametrize("with_mtp", [False, True])
def test_warm_reads_the_layers_the_model_streams(tmp_path, monkeypatch, with_mtp):
    # the bundled tiny packs an MTP layer: 100% without it holds the 4 main layers' 128 experts,
    # and --warm must not ask for the MTP layer's 32 as well (it did, and refused)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    sm = load("tiny", budget="100%", io="buffered", with_mtp=with_mtp, warm=True)
    try:
        assert sm.streamer.cache.n_slots == (160 if with_mtp else 128)
        assert sm.streamer.reader.stats.reads == sm.streamer.cache.n_slots
    finally:
        sm.close()


@pytest.mark.parametrize("cuda", [False, True])
def test_warm_lands_the_experts_on_cuda_only(ckpt, monkeypatch, cuda):
    # CUDA's arena is managed memory: a page read by the host migrates on its first kernel, so a
    # warm load must land every slot there before decoding (as mlx-lm's load evaluates its
    # weights); on CPU the memory is the device's already and a touch would only cost a pass
    from specdec.store.arena import Arena

    touched = []
    monkeypatch.setattr("specdec.stream.source.on_cuda", lambda: cuda)
    monkeypatch.setattr(Arena, "touch", lambda self: touched.append(self.nbytes))
    sm = load(ckpt, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        assert touched == ([sm.streamer.source.arena.nbytes] if cuda else [])
    finally:
        sm.close()
    touched.clear()
    sm = load(ckpt, budget="100%", io="buffered", with_mtp=False)  # not warm: nothing landed
    sm.close()
    assert touched == []


@pytest.mark.parametrize("cuda", [True, False])
def test_lookahead_is_refused_on_cuda_unless_reads_are_pinned(ckpt, monkeypatch, cuda):
    # on the H200 every lookahead run's greedy tokens departed from plain's while its reads
    # landed in managed memory from the host; the backend check is patched, as CI has no GPU
    monkeypatch.setattr("specdec.stream.loader.on_cuda", lambda: cuda)
    if cuda:
        with pytest.raises(
            SpecdecError, match="--lookahead 1 on CUDA with --io buffered.*--io pinned"
        ):
            load(ckpt, budget="50%", io="buffered", with_mtp=False, lookahead=1)
        made = pinned_stand_in(monkeypatch)  # pinned reads land by the copy engine: allowed
        sm = load(ckpt, budget="50%", io="pinned", with_mtp=False, lookahead=1)
        try:
            generate(sm, [1, 2, 3], "none", DecodeConfig(1, 4), stop_at_eos=False)
        finally:
            sm.close()
        assert sum(m.landed for m in made) > 0
        return
    load(ckpt, budget="50%", io="buffered", with_mtp=False, lookahead=1).close()


@pytest.mark.parametrize("path", ["synced", "table", "window"])
def test_kernels_get_uint32_slot_ids_on_every_path(ckpt, monkeypatch, path):
    """Synced, table and window paths hand MLX's gather kernels uint32 slot ids, made once per
    call: an int32 id would be cast again by each projection's kernel (an AsType node apiece).
    The table path (a resident layer whose slots are not one run, or a mixed pack's) is taken
    here by a --warm load whose layers are told to gather instead."""
    got = []
    inner = mx.gather_qmm

    def gather_qmm(*a, **kw):
        got.append(kw["rhs_indices"].dtype)
        return inner(*a, **kw)

    monkeypatch.setattr(mx, "gather_qmm", gather_qmm)
    synced = path == "synced"
    sm = load(
        ckpt, io="buffered", with_mtp=False, budget="50%" if synced else "100%", warm=not synced
    )
    blocks = [m for m in sm.model.modules() if isinstance(m, StreamedSwitchGLU)]
    for m in blocks if path == "table" else []:
        m._h.windows = None  # as a mixed pack's blocks: no window, the table gathers
    try:
        _decode(sm, list(range(40, 56)), n=8)
        tables = [t[2] for t in sm.streamer.source.tables.values() if t[2] is not None]
    finally:
        sm.close()
    assert got and set(got) == {mx.uint32}
    assert (len(tables) == len(blocks)) != synced  # every layer on a table, or none
    assert all(t.first is not None and t.slots.dtype == mx.uint32 for t in tables)
    assert all((m._h.windows is None) == (path == "table") for m in blocks)


def test_a_decode_token_reads_its_routing_with_one_copy(ckpt, monkeypatch):
    """A decode token's deferred calls read their routing from the device with one host copy
    (each a managed allocation and a copy on CUDA): joined in the token's own graph, and each
    call still gets its own routing, in order (the steps equal the synced path's:
    test_warm_full_budget_needs_no_sync_and_keeps_stats)."""
    reads, inner = [], streamer_module.to_host

    def to_host(a):
        reads.append(a.size)
        return inner(a)

    monkeypatch.setattr(streamer_module, "to_host", to_host)
    sm = load(ckpt, io="buffered", with_mtp=False, budget="100%", warm=True)
    try:
        layers, top_k = len(sm.main_moe_layers), sm.model.args.num_experts_per_tok
        tokens, _, seen, _ = _decode(sm, list(range(40, 56)), n=24)
    finally:
        sm.close()
    # the prompt's head's calls one by one (15 positions), then a read a token: its last token
    # is fed as a decode step (loop.py `_first_pick`), then 23 decode tokens
    assert reads == [15 * top_k] * layers + [layers * top_k] * 24
    assert len(seen) == (2 + 23) * layers and len(tokens) == 24
    assert sum(reads) == sum(np.size(idx) for _, idx, _ in seen)


def test_full_budget_greedy_counts_its_steps_and_records_what_a_replay_does(ckpt, monkeypatch):
    """Every expert resident and room for all: a plain greedy token's steps are counted, not
    replayed (specdec.stream.streamer, counted steps): no routing of a decode token is read,
    and tokens, records and the cache's counters equal the replay's."""
    reads, counted = [], []
    inner_read, inner_count = streamer_module.to_host, Streamer._count
    monkeypatch.setattr(streamer_module, "to_host", lambda a: reads.append(a.size) or inner_read(a))
    monkeypatch.setattr(
        Streamer, "_count", lambda self, *a: counted.append(a) or inner_count(self, *a)
    )
    keep = ("tokens", "union", "misses", "accesses", "hits", "reads", "verify_bytes_read")
    runs = []
    for count in (True, False):
        monkeypatch.setattr(loop_module, "COUNT_STEPS", count)
        reads.clear()
        sm = load(ckpt, io="buffered", with_mtp=False, budget="100%", warm=True)
        try:
            lids, top_k = sm.main_moe_layers, sm.model.args.num_experts_per_tok
            res = generate(sm, list(range(40, 56)), "none", DecodeConfig(max_tokens=24),
                           stop_at_eos=False)  # fmt: skip
            steps = [[getattr(r, k) for k in keep] for r in res.records]
            runs.append((res.tokens, steps, sm.streamer.cache.stats(), list(reads)))
        finally:
            sm.close()
    (tokens, steps, stats, mine), (ref_tokens, ref_steps, ref_stats, ref_reads) = runs
    assert (tokens, steps, stats) == (ref_tokens, ref_steps, ref_stats)
    # the prompt's head's calls, then the first pick's forward: read; the 23 decode tokens: not
    layers = len(lids)
    assert mine == [15 * top_k] * layers + [layers * top_k]
    assert ref_reads == mine + [layers * top_k] * 23
    assert counted == [(lid, top_k, "verify") for _ in range(23) for lid in lids]


def test_steps_are_replayed_wherever_their_routing_is_wanted_or_could_miss(ckpt, monkeypatch):
    """Counting needs distinct picks, every streamed expert resident with room for all, and no
    one wanting the routing: an observer, a lookahead or given routing each turn it off."""
    cases = {"warm": {"budget": "100%", "warm": True}, "not warm": {"budget": "100%"},
             "below full": {"budget": "50%"}, "lookahead": {"budget": "100%", "warm": True,
             "lookahead": 1}}  # fmt: skip
    monkeypatch.setattr(streamer_module.Streamer, "_count", lambda *a: pytest.fail("counted"))
    for name, kw in cases.items():
        sm = load(ckpt, io="buffered", with_mtp=False, **kw)
        try:
            s = sm.streamer
            with s.counted(True) as on:
                assert on is (name == "warm"), name
            if name != "warm":
                continue
            with s.counted(False) as on:  # a family whose picks may repeat (LongCat-Flash's)
                assert not on
            with s.log.watching(lambda *a: None), s.counted(True) as on:
                assert not on
            s.route_override = lambda layer, idx: idx
            with s.counted(True) as on:
                assert not on
            s.route_override = None
            sm.family = dataclasses.replace(sm.family, distinct_picks=False)
            generate(sm, list(range(40, 56)), "none", DecodeConfig(max_tokens=8))  # replayed
        finally:
            sm.close()


def test_an_observer_that_comes_while_counting_still_sees_every_call(ckpt):
    """A counted block left open (a decode's generator not closed) counts no call an observer
    attached since would miss: with one watching, calls defer their routing again."""
    sm = load(ckpt, io="buffered", with_mtp=False, budget="100%", warm=True)
    try:
        s, seen = sm.streamer, []
        with s.counted(True) as on:
            assert on
            with s.log.watching(lambda layer, idx, phase: seen.append(layer)):
                mx.eval(sm.model(mx.array([[5]]), cache=make_prompt_cache(sm.model)))
                s.catch_up()
        assert seen == sm.main_moe_layers
    finally:
        sm.close()
