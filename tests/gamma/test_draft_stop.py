"""The draft stop (specdec/gamma/draft_stop.py): the self-draft's routing predicts verify's reads,
and `--gamma auto` ends a draft early where the next position does not pay; lossless either way.

pytest tests/gamma/test_draft_stop.py

On the bundled tiny model (its first MoE layer is layer 1; layer 0 is dense). Where a test needs
the pass's γ held at 4, the chooser's pick is stubbed (`_hold_at`): the bundled model under the
chooser's own rule drafts almost never (benchmarks/bench_draft_stop.py); every other part (the
chooser's acceptance and cost, the device model, the cache, the model) is the real one.
"""

from __future__ import annotations

import collections
import dataclasses

import pytest

from specdec.clock.passes import PassClock
from specdec.clock.profiles import get_profile
from specdec.clock.roofline import forward_time
from specdec.core.errors import SpecdecError
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import Decode, DecodeConfig
from specdec.decode.records import summarize
from specdec.decode.run import plain_greedy
from specdec.gamma.chooser import Choice
from specdec.stream.loader import load

N_TOKENS = 48
PROMPT = "def fibonacci(n):"
# the M4 with a disk 262x slower (10 MB/s): a drafted position's misses outweigh its tokens
SLOW_DISK = dataclasses.replace(get_profile("m4-24gb"), name="slow-disk", read_curve=((1, 0.01),))


def _tiny(budget: str):
    # 100%: every expert preloaded (warm), so no drafted expert is ever missing
    sm = load("tiny", budget=budget, warm=budget == "100%")
    prompt = sm.encode(PROMPT)
    plain = plain_greedy(sm, prompt, N_TOKENS, stop_at_eos=False)
    yield budget, sm, prompt, plain
    sm.close()


@pytest.fixture(scope="module")
def tiny10():
    yield from _tiny("10%")


@pytest.fixture(scope="module")
def tiny100():
    yield from _tiny("100%")


@pytest.fixture(params=["10%", pytest.param("100%", marks=pytest.mark.slow)])
def tiny(request):
    return request.getfixturevalue(f"tiny{request.param[:-1]}")


def _hold_at(run: Decode, gamma: int) -> None:
    """Stub of the chooser's pick: every pass drafts toward `gamma` (its estimates stay live)."""
    run.chooser.choose = lambda context=0, left=1 << 30, ends=False: Choice(
        min(gamma, left), "best"
    )


def _decode(sm, prompt, gamma, mode, profiles=(), hold=None):
    sm.reset_cache()
    cfg = DecodeConfig(gamma=gamma, max_tokens=N_TOKENS, draft_stop=mode)
    run = Decode(sm, prompt, DrafterSpec.parse("self").build(sm), cfg, profiles)
    if hold:
        _hold_at(run, hold)
    records = list(run.passes())
    return run.generated, records


def test_the_stop_triggers_where_drafted_experts_miss(tiny10):
    """10%: drafted positions' experts miss."""
    _, sm, prompt, plain = tiny10
    tokens, recs = _decode(sm, prompt, "auto", "stop", (SLOW_DISK,), hold=4)
    assert tokens == plain, "greedy auto with the draft stop must equal plain greedy"
    why = collections.Counter(r.draft_routing["why"] for r in recs if r.draft_routing)
    assert why["rate"] > 0, f"at 10% over a slow disk some draft must stop early: {why}"
    assert summarize(recs)["draft_ends"] == dict(sorted(why.items()))
    for r in recs:
        d = r.draft_routing
        if d and d["why"] != "cap":
            assert r.drafted == d["verified"] - 1 < 3, "a stop verifies fewer than γ positions"
            assert d["steps"] == r.drafted + 2, "a stop after step i keeps drafts 1..i-1"
            assert sum(d["predicted_misses"].values()) > 0, "it stopped on a predicted read"


@pytest.mark.slow
def test_the_stop_never_triggers_where_drafts_cost_no_reads(tiny100):
    """100%, warm: every drafted expert is resident."""
    _, sm, prompt, plain = tiny100
    tokens, recs = _decode(sm, prompt, "auto", "stop", (SLOW_DISK,), hold=4)
    assert tokens == plain
    assert all(r.draft_routing["why"] == "cap" for r in recs if r.draft_routing)
    assert all(r.drafted == 3 for r in recs[:-1]), "γ = 4 held: three drafts a pass"


def test_auto_with_the_stop_equals_plain_greedy(tiny):
    """The chooser's own pick (no stub): lossless, and the stop only ever shortens a draft."""
    _, sm, prompt, plain = tiny
    tokens, recs = _decode(sm, prompt, "auto", "stop")
    assert tokens == plain
    for r in recs:
        assert r.drafted + 1 <= r.gamma


@pytest.mark.slow
def test_the_draft_predicts_verify_exactly_at_the_first_moe_layer(tiny):
    """Record mode at a fixed γ = 4: the draft's routing of a position equals verify's at the
    first MoE layer (its input is the same), so its predicted misses are verify's misses there;
    and the fixed γ stays fixed (the record mode never stops)."""
    budget, sm, prompt, plain = tiny
    tokens, recs = _decode(sm, prompt, 4, "record")
    assert tokens == plain
    first = str(sm.main_moe_layers[0])
    predicted_reads = 0
    for r in recs:
        d = r.draft_routing
        assert bool(d) == (r.drafted > 0)
        if not d:
            continue
        assert d["why"] == "cap" and d["cap"] == 4 and d["positions"] == r.drafted
        assert r.drafted == 3 or r is recs[-1], "a fixed γ stays fixed"
        assert d["predicted_union"][first] == d["actual_union"][first]
        assert d["predicted_misses"][first] == d["actual_misses"][first] == d["hit_misses"][first]
        for lid, n in d["actual_misses"].items():  # verify reads at least its first positions'
            assert n <= r.misses[lid]
        predicted_reads += d["predicted_misses"][first]
    assert (predicted_reads > 0) == (budget == "10%"), "10% must miss, 100% must not"


def test_the_forwards_a_stop_drops_are_charged_to_the_pass(tiny10):
    """A stop after draft step i keeps i−1 drafts of i+1 forwards: the clock charges all."""
    _, sm, _, _ = tiny10
    clock = PassClock.for_decode(sm, DrafterSpec.parse("self").build(sm))
    p = get_profile("m4-24gb")
    kw = dict(drafted=1, context=20, draft_steps=[], verify_steps=[], measured_compute_s=0.0)
    kept = clock.modeled(p, **kw).total_s
    ran = clock.modeled(p, **kw, draft_forwards=3).total_s
    shape, fwd = clock.draft_forwards(1, 20, ())[0]
    assert ran == pytest.approx(kept + 2 * forward_time(p, shape, fwd).total_s)
    assert ran > kept


def test_an_unknown_draft_stop_mode_is_a_clear_error(tiny10):
    _, sm, prompt, _ = tiny10
    with pytest.raises(SpecdecError, match="draft stop 'stpo': use stop, record, off"):
        Decode(sm, prompt, DrafterSpec.parse("self").build(sm), DecodeConfig(draft_stop="stpo"))
