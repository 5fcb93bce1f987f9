"""Tests of the device model: shapes, roofline, router syncs, the read timeline, the M4 check,
and the per-pass records it writes. Run: `pytest tests/clock/test_clock_model.py`."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from specdec.cli import main as specdec_main
from specdec.clock import DeviceProfile, Forward, ModelShape, ReadStep, forward_time, get_profile
from specdec.clock.check import QUESTION_RUNS, TOLERANCE, reproduce
from specdec.clock.passes import PassClock
from specdec.clock.roofline import roof
from specdec.core.errors import SpecdecError
from specdec.decode.records import PassRecord, read_records, summarize
from tests.helpers import fast_cases

# hidden 64, 4 heads of 16, 2 KV heads, 2 layers (layer 0 dense), 8 experts top-2 of 32
SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "intermediate_size": 48,
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "quantization": {"bits": 4, "group_size": 64},
}
BPP = 0.5 + 4 / 64  # 4-bit weight + 16-bit scale and bias per 64


def small_profile(**kw) -> DeviceProfile:
    base = dict(mem_gbps=0.1, peak_tflops=1e-3, router_sync_s=1e-3, read_curve=((1, 1.0),))
    return DeviceProfile("t", **(base | {"read_block_bytes": 1e6, "read_latency_s": 0.0} | kw))


def test_shape_counts_by_hand():
    s = ModelShape.from_config(SMALL)
    assert s.moe_layers == frozenset({1})
    assert s.attn_params == 2 * 64 * 64 + 2 * 64 * 32  # q, o: 64x64; k, v: 64x32
    assert s.expert_params == 3 * 64 * 32 and s.dense_mlp_params == 3 * 64 * 48
    assert s.expert_block_bytes == pytest.approx(3 * 64 * 32 * BPP)
    assert s.kv_per_token == 2 * 2 * 16


def test_roofline_against_hand_computation():
    s = ModelShape.from_config(SMALL)
    fwd = Forward(positions=2, context=0, layers=(0, 1), unions={1: 3})
    # memory 1e8 B/s, 1e9 FLOP/s. Attention per layer: 12288 params -> 6912 B + KV 2 x 64 x 2 B
    # = 7168 B (71.68 µs); 2·2·12288 + 2·2·2·128 = 50176 FLOP (50.2 µs): memory-bound.
    attn = 71.68e-6
    # dense MLP: 9216 params -> 5184 B (51.84 µs); 2·2·9216 = 36864 FLOP (36.9 µs)
    dense = 51.84e-6
    # MoE MLP, union 3: router 512 params + 3 experts x 6144 -> (512 + 18432) x 0.5625 = 10656 B
    # (106.56 µs); FLOPs 2·2·(512 + 2 x 6144) = 51200 (51.2 µs)
    moe = 106.56e-6
    # head: 6400 params -> 3600 B (36 µs); 25600 FLOP (25.6 µs)
    head = 36e-6
    t = forward_time(small_profile(), s, fwd)
    assert t.compute_s == pytest.approx(2 * attn + dense + moe + head)
    assert t.sync_s == pytest.approx(1e-3)  # one MoE layer, one router sync
    assert t.read_s == 0 and t.total_s == pytest.approx(t.compute_s + 1e-3)
    # with memory 1000x faster every part is FLOP-bound: the sum of FLOPs over the peak
    fast = forward_time(small_profile(mem_gbps=100.0), s, fwd)
    assert fast.compute_s == pytest.approx((2 * 50176 + 36864 + 51200 + 25600) / 1e9)


def test_router_sync_is_per_moe_layer_per_forward():
    cfg = SMALL | {"num_hidden_layers": 5}  # layers 1..4 are MoE
    s = ModelShape.from_config(cfg)
    fwd = Forward(1, 10, tuple(range(5)), {i: 2 for i in range(1, 5)})
    assert forward_time(small_profile(router_sync_s=6e-4), s, fwd).sync_s == pytest.approx(4 * 6e-4)
    assert forward_time(small_profile(router_sync_s=0.0), s, fwd).sync_s == 0.0
    # layers that ran on device slot tables (all resident, replayed after the token) skip it
    steps = tuple(ReadStep(i, 0, 0, synced=i != 2) for i in range(1, 5))
    fwd = Forward(1, 10, tuple(range(5)), {i: 2 for i in range(1, 5)}, steps)
    assert forward_time(small_profile(router_sync_s=6e-4), s, fwd).sync_s == pytest.approx(3 * 6e-4)


def test_a_decode_form_verify_pays_position_s_per_further_position_and_moe_layer():
    """Each position past the first of a decode-form verify forward is its own one-token calls:
    `position_s` per MoE layer each; a native (batched) verify and a one-position forward pay
    none, and the rest of the time is the same."""
    from specdec.stream.streamer import LayerStep

    cfg = SMALL | {"num_hidden_layers": 5}  # layers 1..4 are MoE
    shape, p = ModelShape.from_config(cfg), small_profile(router_sync_s=6e-4, position_s=2e-4)
    steps = [LayerStep(i, 4, 1, 10**6, "verify") for i in range(1, 5)]
    kw = dict(context=7, draft_steps=[], verify_steps=steps, measured_compute_s=0.0)
    decode = PassClock(shape, tuple(range(5)), "none").modeled(p, drafted=3, **kw)
    native = PassClock(shape, tuple(range(5)), "none", verify_form="native").modeled(
        p, drafted=3, **kw
    )
    assert decode.sync_s == pytest.approx(4 * (6e-4 + 3 * 2e-4))
    assert native.sync_s == pytest.approx(4 * 6e-4)
    assert decode.read_s == pytest.approx(native.read_s) and native.read_s > 0  # one union read
    plain = PassClock(shape, tuple(range(5)), "none").modeled(p, drafted=0, **kw)
    assert plain.sync_s == pytest.approx(4 * 6e-4)
    with pytest.raises(SpecdecError, match="position_s"):
        small_profile(position_s=-1e-3)


def test_a_call_that_reads_pays_miss_call_s_once_whatever_it_reads():
    """`miss_call_s` is the host path of a MoE layer call that reads (issuing, bookkeeping): paid
    once by each layer that misses, however many blocks, none by a layer that hits or a dense
    one, and not part of the reads' own time."""
    cfg = SMALL | {"num_hidden_layers": 5}  # layers 1..4 are MoE
    shape = ModelShape.from_config(cfg)
    steps = (ReadStep(1, 3, 3 * 10**5), ReadStep(2, 0, 0), ReadStep(3, 1, 10**5),
             ReadStep(4, 0, 0))  # fmt: skip
    fwd = Forward(1, 10, tuple(range(5)), {i: 2 for i in range(1, 5)}, steps)
    base, p = small_profile(router_sync_s=6e-4), small_profile(router_sync_s=6e-4, miss_call_s=3e-4)
    got, without = forward_time(p, shape, fwd), forward_time(base, shape, fwd)
    assert got.sync_s == pytest.approx(without.sync_s + 2 * 3e-4)
    assert (got.read_s, got.compute_s) == (without.read_s, without.compute_s)
    assert got.total_s == pytest.approx(without.total_s + 2 * 3e-4)
    with pytest.raises(SpecdecError, match="miss_call_s"):
        small_profile(miss_call_s=-1e-3)


def test_a_decode_form_verify_computes_as_one_position_forwards_do():
    """A decode-form verify forward of T positions computes what T one-position forwards
    compute (attention over a context one longer each, the dense MLP, router and head T times,
    each position its own top-k experts), though its union is read once; batched, far less at
    a union below T·k; on a runtime that verifies batched (`batched_verify`, ds4) the native
    price whatever the run's form."""
    cfg = SMALL | {"num_hidden_layers": 5}  # layers 1..4 are MoE, top-2
    shape, p = ModelShape.from_config(cfg), small_profile(router_sync_s=6e-4, position_s=2e-4)
    layers, T, context = tuple(range(5)), 4, 7
    steps = [ReadStep(i, 3, 3 * 10**5) for i in range(1, 5)]
    unions = {i: 5 for i in range(1, 5)}  # 5 distinct experts of 4 positions x top-2

    def verify(positionwise: bool, profile=p):
        return forward_time(profile, shape, Forward(T, context, layers, unions, tuple(steps),
                                                    positionwise=positionwise))  # fmt: skip

    ones = [Forward(1, context + i, layers, {i: 2 for i in range(1, 5)}) for i in range(T)]
    assert verify(True).compute_s == pytest.approx(
        sum(forward_time(p, shape, f).compute_s for f in ones)
    )
    # the MoE MLP by hand, memory-bound at 1e8 B/s: 4 calls of router + 2 experts against
    # one call of router + the union's 5 experts
    moe_each, moe_batched = 4 * (512 + 2 * 6144) * BPP / 1e8, (512 + 5 * 6144) * BPP / 1e8
    attn_gap = verify(True).compute_s - verify(False).compute_s - 4 * (moe_each - moe_batched)
    assert attn_gap > 0  # attention, dense MLP... and head read their weights T times too
    assert verify(True).read_s == pytest.approx(verify(False).read_s) and verify(True).read_s > 0
    ds4 = replace(p, batched_verify=True)
    assert verify(True, ds4).total_s == verify(False, ds4).total_s == verify(False).total_s
    with pytest.raises(SpecdecError, match="batched_verify must be true or false"):
        small_profile(batched_verify="yes")


def test_a_decode_wholly_resident_is_charged_no_router_sync(tmp_path, monkeypatch):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from specdec.checkpoint.random_models import make_random
    from specdec.clock.passes import read_steps
    from specdec.stream.loader import load

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = make_random("qwen3_moe", tmp_path / "m", bits=4, seed=0)
    sm = load(src, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        mx.eval(sm.model(mx.array([[1, 2, 3]]), cache=make_prompt_cache(sm.model)))
        steps = read_steps(sm.streamer.drain())  # the deferred host steps, replayed
    finally:
        sm.close()
    assert steps and not any(s.synced for s in steps)


def test_reads_wait_for_the_router_and_overlap_where_the_runtime_overlaps():
    s = ModelShape.from_config(SMALL)
    block = s.expert_block_bytes
    p = small_profile(router_sync_s=0.0, mem_gbps=100.0, read_curve=((1, 1e-3),))  # 1 MB/s disk
    steps = (ReadStep(1, 2, int(2 * block)),)
    fwd = Forward(1, 0, (0, 1), {1: 4}, steps)
    t = forward_time(p, s, fwd)
    read = p.read_time(2, int(2 * block) / 2)
    assert t.read_s == pytest.approx(read)  # nothing overlaps a layer's own misses here
    assert t.bytes_read == int(2 * block) and t.reads == 2
    ov = forward_time(replace(p, overlap_reads=True), s, fwd)
    moe_mlp = roof(p, s.mlp_cost(1, 1, 4))
    assert ov.read_s == pytest.approx(read - moe_mlp / 2)


def test_prefetch_lands_while_later_layers_compute():
    cfg = SMALL | {"num_hidden_layers": 3}  # MoE layers 1 and 2
    s = ModelShape.from_config(cfg)
    block = int(s.expert_block_bytes)
    p = small_profile(router_sync_s=0.0, read_curve=((1, 1e-3),))
    demand = (ReadStep(1, 0, 0), ReadStep(2, 1, block))
    ahead = (ReadStep(1, 0, 0), ReadStep(2, 0, block, prefetched=1), ReadStep(2, 0, 0))
    fwd = Forward(1, 0, (0, 1, 2), {1: 2, 2: 2}, demand)
    t_demand = forward_time(p, s, fwd)
    t_ahead = forward_time(p, s, replace(fwd, steps=ahead))
    assert t_demand.bytes_read == t_ahead.bytes_read == block
    # the prefetch starts after layer 1's router: layer 1's MLP and layer 2's attention hide it
    hidden = roof(p, s.mlp_cost(1, 1, 2)) + roof(p, s.attention_cost(1, 0))
    assert t_ahead.read_s == pytest.approx(t_demand.read_s - hidden)


def test_landing_is_priced_by_the_blocks_one_call_lands():
    """land_curve: a call landing few blocks pays more per byte than one landing many (the
    H200's curve, 1 block at 7 GB/s, 32 at 14.7); the same bytes landed by two layers' calls of
    one block each cost more than by one call of two; prefetched blocks land with the layer's
    own. Empty curve: land_gbps whatever the count."""
    cfg = SMALL | {"num_hidden_layers": 3}  # MoE layers 1 and 2
    s = ModelShape.from_config(cfg)
    block = int(s.expert_block_bytes)
    curve = ((1, 7.0), (2, 8.0), (32, 14.7))
    p = small_profile(router_sync_s=0.0, read_curve=((1, 1e9),), land_curve=curve, land_gbps=10)
    assert p.land_time(block, 1) == pytest.approx(block / 7e9)
    assert p.land_time(block, 17) == pytest.approx(block / (8 + 6.7 * 15 / 30) / 1e9)
    assert p.land_time(block, 64) == pytest.approx(block / 14.7e9)  # clamped at the ends
    assert replace(p, land_curve=()).land_time(block, 1) == pytest.approx(block / 10e9)
    assert p.land_time(0, 0) == 0.0
    spread = Forward(1, 0, (0, 1, 2), {1: 2, 2: 2}, (ReadStep(1, 1, block), ReadStep(2, 1, block)))
    one = replace(spread, steps=(ReadStep(1, 0, 0), ReadStep(2, 2, 2 * block)))
    ahead = replace(spread, steps=(ReadStep(1, 0, 0), ReadStep(2, 1, block, prefetched=1),
                                   ReadStep(2, 1, block)))  # fmt: skip
    land = {k: forward_time(p, s, f).read_s - 2 * p.read_time(1, block) for k, f in
            (("spread", spread), ("one", one), ("ahead", ahead))}  # fmt: skip
    assert land["spread"] == pytest.approx(2 * block / 7e9)
    assert land["one"] == pytest.approx(2 * block / 8e9)
    assert land["ahead"] == pytest.approx(2 * block / 8e9)  # two blocks land at layer 2
    for bad in (((0, 5.0),), ((1, 0.0),)):
        with pytest.raises(SpecdecError, match="land_curve"):
            replace(p, land_curve=bad)


def test_bundled_m4_profile_reproduces_the_question_within_tolerance():
    rows = reproduce(get_profile("m4-24gb"))
    checked = [(r, t) for r, t in rows if r.checked]
    assert len(checked) == 3
    for run, t in checked:
        ratio = 1 / t.total_s / run.measured_tps
        assert abs(ratio - 1) <= TOLERANCE, f"{run.label}: modeled/measured {ratio:.2f}"
    base = checked[0][1]  # the §2 run: 75.3% hits -> 122.5 misses of 496 accesses
    assert abs(base.reads - 122.5) <= 0.5 and base.sync_s == pytest.approx(62 * 0.6e-3)
    # its blocked-on-disk time, 10.8 s over 32 tokens, against the modeled read time
    assert base.read_s == pytest.approx(10.8 / 32, rel=0.1)
    # the unchecked row says why it is unchecked: 53% hits cannot give 2.34 t/s at 2.62 GB/s
    (unchecked,) = [r for r in QUESTION_RUNS if not r.checked]
    assert unchecked.hit_rate == 0.53 and "cannot" in unchecked.source


def test_clock_cli(capsys):
    assert specdec_main(["clock", "check", "--profile", "m4-24gb"]) == 0
    out = capsys.readouterr().out
    assert "| 2.37 | 2.34 | 1.01 |" in out
    assert specdec_main(["clock", "show", "m5-24gb"]) == 0
    assert "ds4" in capsys.readouterr().out
    assert specdec_main(["clock", "show", "nope"]) == 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import os

    os.environ.setdefault("SPECDEC_CACHE", str(tmp_path_factory.mktemp("cache")))
    from specdec.stream.loader import load

    sm = load("tiny", budget="10%")
    yield sm
    sm.close()


@pytest.mark.parametrize("drafter", fast_cases(["lookup", "self", "mtp"]))
def test_decode_records_carry_the_device_model(tiny, tmp_path, drafter):
    """Real decode on the bundled model: router syncs count the pass's forwards, records parse."""
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate

    tiny.reset_cache()
    profiles = (get_profile("m4-24gb"), get_profile("this-machine"))
    path = tmp_path / "r.jsonl"
    res = generate(
        tiny,
        tiny.encode("def f(x):"),
        drafter,
        DecodeConfig(gamma=3, max_tokens=12),
        profiles,
        path,
    )
    moe = len(tiny.main_moe_layers)
    rows = read_records(path)
    assert rows and all(r["modeled_version"] == 2 for r in rows)
    recs = [PassRecord(**r) for r in rows]
    for r in recs:
        sync = r.modeled_parts["m4-24gb"]["sync_s"] / 0.6e-3
        if drafter == "mtp":  # verify's MoE layers + one MTP layer per draft
            assert sync == pytest.approx(moe + r.drafted)
        else:  # self: drafts run the main model too; lookup: only the verify forward
            expected = moe * (1 + r.drafted) if drafter == "self" else moe
            assert sync == pytest.approx(expected)
        assert r.modeled_s["m4-24gb"] == pytest.approx(sum(r.modeled_parts["m4-24gb"].values()))
        # this-machine: measured compute, unchanged
        assert r.modeled_parts["this-machine"]["compute_s"] == pytest.approx(r.compute_s)
    s = summarize(recs, ["m4-24gb", "this-machine"])
    assert s["modeled_tokens_per_s/m4-24gb"] == pytest.approx(
        res.summary["modeled_tokens_per_s/m4-24gb"]
    )


def test_gamma_auto_names_the_profile_it_priced_on(tiny, tmp_path, monkeypatch, capsys):
    """auto prices passes on a roofline profile: the one given, else DEFAULT_PROFILE, said on
    stderr when the user gave another, and named in the summary either way."""
    from specdec.clock import DEFAULT_PROFILE
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.gamma.spec import AUTO

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # this-machine: the shipped fallback
    cfg = DecodeConfig(gamma=AUTO, max_tokens=6)
    runs = {
        "this-machine": (get_profile("this-machine"),),
        "m5-24gb": (get_profile("this-machine"), get_profile("m5-24gb")),
        "none": (),
    }
    seen = {}
    for key, profiles in runs.items():
        tiny.reset_cache()
        res = generate(tiny, tiny.encode("def f(x):"), "lookup", cfg, profiles)
        seen[key] = (res.summary["gamma_auto_profile"], capsys.readouterr().err)
    assert seen["this-machine"][0] == DEFAULT_PROFILE
    (note,) = [ln for ln in seen["this-machine"][1].splitlines() if "--gamma auto" in ln]
    assert note.startswith("specdec: note:") and DEFAULT_PROFILE in note
    assert seen["m5-24gb"] == ("m5-24gb", "")  # a roofline profile given: priced on it, quiet
    assert seen["none"] == (DEFAULT_PROFILE, "")  # nothing given: the default, as documented
    tiny.reset_cache()
    plain = generate(tiny, tiny.encode("def f(x):"), "lookup", DecodeConfig(gamma=2, max_tokens=4))
    assert plain.summary["gamma_auto_profile"] is None


def test_records_without_the_device_model_still_parse():
    """A version-1 record (before specdec.clock's device model) loads and summarizes."""
    row = {
        "pass_idx": 0, "gamma": 1, "drafted": 0, "accepted": 0, "committed": 1, "tokens": [5],
        "union": {"1": 4}, "misses": {"1": 1}, "draft_union": {}, "draft_bytes_read": 0,
        "verify_bytes_read": 100, "draft_misses": 0, "verify_misses": 1, "accesses": 4,
        "hits": 3, "reads": 1, "blocked_s": 0.001, "compute_s": 0.009, "wall_s": 0.01,
        "modeled_s": {"m4-24gb": 0.02},
    }  # fmt: skip
    rec = PassRecord(**json.loads(json.dumps(row)))
    assert rec.modeled_version == 1 and rec.modeled_parts == {}
    s = summarize([rec], ["m4-24gb"])
    assert s["modeled_tokens_per_s/m4-24gb"] == pytest.approx(50.0)
    assert "modeled_read_s/m4-24gb" not in s
    assert asdict(rec)["modeled_version"] == 1


def test_draft_model_forwards_use_the_draft_shape():
    main = ModelShape.from_config(SMALL)
    draft = ModelShape.from_config(SMALL | {"num_hidden_layers": 1, "first_k_dense_replace": 1})
    clock = PassClock(main, (0, 1), "model", draft_shape=draft)
    fw = clock.draft_forwards(drafted=2, context=7, steps=())
    assert [s for s, _ in fw] == [draft, draft] and fw[0][1].layers == (0,)
    assert PassClock(main, (0, 1), "none").draft_forwards(3, 7, ()) == []


def test_a_rollback_re_feed_is_charged_as_one_more_forward():
    """Untrimmable caches re-feed the accepted prefix after a rejection (decode/rollback.py)."""
    from specdec.stream.streamer import LayerStep

    clock = PassClock(ModelShape.from_config(SMALL), (0, 1), "none")
    p = small_profile()
    verify = [LayerStep(1, 4, 2, 2 * 10**6, "verify")]
    again = [LayerStep(1, 2, 1, 10**6, "rollback")]
    kw = dict(drafted=3, context=7, draft_steps=[], verify_steps=verify, measured_compute_s=0.0)
    plain = clock.modeled(p, **kw)
    refed = clock.modeled(p, **kw, refeed=(2, again))
    assert refed.total_s > plain.total_s
    assert refed.sync_s == 2 * plain.sync_s  # its MoE layer syncs on its router once more


def test_expected_draft_reads_are_each_drafts_own_mean_of_whole_reads():
    """Each MTP draft is a forward of its own: a draft missing 0.5 on average costs the mean of
    that forward with none and with one read, whatever the other drafts read (cumulative
    rounding gave the second of [1.0, 0.5] no read and a third of [1, 0.5, 0.5] a whole one)."""
    cfg = SMALL | {"num_nextn_predict_layers": 1}
    shape = ModelShape.from_config(cfg, moe_layers=[1, 2])
    clock = PassClock(shape, (0, 1), "mtp", mtp_layer=2)
    p, u, m = small_profile(), np.array([2.0]), np.array([0.0])

    def t(dm) -> float:
        return clock.expected(p, 1 + len(dm), 7, (1,), u, m, 10**6, 2.0, np.array(dm, float))

    zero, one = t([0.0]), t([1.0])
    assert one > zero
    assert t([0.5]) == pytest.approx((zero + one) / 2)
    assert t([1.0, 0.5]) - t([1.0, 0.0]) == pytest.approx((one - zero) / 2)
    assert t([1.0, 0.5, 0.5]) - t([1.0, 0.0, 0.0]) == pytest.approx(one - zero)


def test_expected_time_of_fractional_reads_is_the_mean_of_whole_reads():
    """A pass not yet run expects 0.5 reads: half the time of none and of one read (whole reads
    rounded, 0.5 was costed as no read at all)."""
    clock = PassClock(ModelShape.from_config(SMALL), (0, 1), "none")
    p, union = small_profile(), np.array([2.0])

    def t(m: float) -> float:
        return clock.expected(p, 1, 7, (1,), union, np.array([m]), 10**6)

    assert t(1.0) > t(0.0)
    assert t(0.5) == pytest.approx((t(0.0) + t(1.0)) / 2)
    assert t(1.25) == pytest.approx(0.75 * t(1.0) + 0.25 * t(2.0))
