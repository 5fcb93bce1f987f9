"""Speculation-aware caching: sieve and s3fifo against libCacheSim, +demote/+protect, losslessness.

pytest tests/cache/test_spec_cache.py

- On steps of one key the step semantics are libCacheSim's request semantics, so our SIEVE and
  S3-FIFO must give its Sieve's and S3FIFO's hit for every access (S3-FIFO from 20 slots: below,
  libCacheSim's 10% small queue rounds to nothing and it admits no key).
- The runtime's verdict path (the streamer notes each layer's routing, the loop reports the
  accepted count) and the replay's (pass_verdict over the pass's routes) give the same hits.
- Decoding with every new policy and option stays exact: greedy tokens equal plain greedy.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.cache.spec import PolicySpec
from specdec.cache.speculative import SpecOptions, verdict_keys
from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.sim.drive import drive_hits, pass_verdict
from specdec.sim.lcs import lcs_hits
from specdec.sim.replay import Access, access_sequence, policy_hits
from specdec.sim.simulate import simulate
from specdec.stream.loader import load
from specdec.trace.synthetic import synthetic_trace
from tests.helpers import fast_cases


@pytest.mark.parametrize("seed", fast_cases([0, 1]))
def test_sieve_and_s3fifo_equal_libcachesim_on_one_key_steps(seed):
    rng = np.random.default_rng(seed)
    for n_keys, slots in ((80, (4, 19, 20, 60)), (600, (25, 100, 300))):
        keys = (rng.zipf(1.2, size=5000) % n_keys).tolist()
        acc = Access.from_steps([[k] for k in keys], n_keys)
        for n in slots:
            for ours, theirs in (("sieve", "Sieve"), ("s3fifo", "S3FIFO")):
                if theirs == "S3FIFO" and n < 20:
                    continue
                mine = policy_hits(ours, acc, n)[0]
                assert mine.tolist() == lcs_hits(theirs, acc, n).tolist(), (ours, n_keys, n)
                assert 0 < mine.sum() < len(keys)


def test_policy_options_parse_and_refuse():
    assert PolicySpec.parse("lru") == PolicySpec("lru", SpecOptions())
    spec = PolicySpec.parse("s3fifo+protect+demote")
    assert spec == PolicySpec("s3fifo", SpecOptions(True, True))
    assert str(spec) == "s3fifo+demote+protect"  # one label, whatever order the user wrote
    with pytest.raises(SpecdecError, match=r"unknown option \+evict"):
        PolicySpec.parse("lru+evict")
    with pytest.raises(SpecdecError, match="unknown cache policy 'belady'"):
        PolicySpec.parse("belady")  # an offline bound: the simulator's, not the runtime's
    assert PolicySpec.parse("belady", offline=True).name == "belady"
    with pytest.raises(SpecdecError, match=r"unknown policy 'belady\+protect'"):
        PolicySpec.parse("belady+protect", offline=True)
    with pytest.raises(SpecdecError, match="cannot demote"):
        ExpertCache(8, make_policy("static", 8, hotlist=[1, 2], scratch=4), SpecOptions(True))


def test_verdict_keys():
    idx = np.array([[1, 2], [2, 3], [3, 4], [5, 1]])  # [γ = 4, k = 2]
    # 2 committed positions: 4 and 5 only rejected ones chose; 3 was committed's too
    assert verdict_keys([(100, idx)], 2) == ([104, 105], [102, 103])
    assert verdict_keys([(0, idx)], 4) == ([], [5, 1])


def test_demoted_keys_go_first_and_come_back_on_a_hit():
    cache = ExpertCache(4, make_policy("lru", 4), SpecOptions(demote=True))
    cache.access([1, 2, 3, 4])  # LRU order 1 2 3 4
    cache.judge(demote=[4, 9], protect=[])  # 9 is not resident: ignored
    assert cache.demoted == 1
    assert [k for k, _ in cache.access([5])] == [5]
    assert cache.slot_of(4) is None and cache.slot_of(1) is not None  # 4 went, not LRU's 1
    cache.judge(demote=[3], protect=[])
    assert cache.access([3]) == [] and cache.demoted_hits == 1  # a hit hands it back
    cache.access([6])  # the policy's oldest goes: 1
    assert cache.slot_of(1) is None and cache.slot_of(3) is not None


def test_protected_keys_outlive_a_wide_step():
    cache = ExpertCache(4, make_policy("lru", 4), SpecOptions(protect=True))
    cache.access([1, 2, 3, 4])
    cache.judge(demote=[], protect=[1, 2])
    cache.access([5, 6])  # plain LRU would evict 1 and 2
    assert cache.slot_of(1) is not None and cache.slot_of(2) is not None
    cache.access([7, 8, 9])  # 5 and 6 go, then the older protected key: nothing else is left
    assert cache.resident_keys() == [2, 7, 8, 9]


@pytest.mark.parametrize(
    "policy",
    [
        "lru+demote+protect",
        "s3fifo+demote",
        "sieve+protect",
        "lru+scratch",
        "s3fifo+protect+scratch",
    ],
)
def test_runtime_verdict_path_equals_replay(policy):
    """Notes per layer + verdict(accepted), as streamer and loop call them, == drive_hits."""
    trace = synthetic_trace(300, n_layers=6, n_experts=32, top_k=4, seed=2)
    acc = access_sequence(trace, gamma=4, alpha=0.6, seed=3)
    n = 40
    cache = PolicySpec.parse(policy).cache(n)
    E, L = trace.n_experts, trace.n_layers
    hits = 0
    for p, (_, live, accepted) in enumerate(acc.plan.tolist()):
        for layer in range(L):
            s = p * L + layer
            ks = acc.keys[acc.ptr[s] : acc.ptr[s + 1]].tolist()
            idx = acc.routes[p, :live, layer] - layer * E  # [live, k] experts of the layer
            cache.note(layer * E, idx[None])  # the streamer's [1, γ, k]
            hits += len(ks) - len(cache.access(ks))
        cache.tick(live)
        cache.verdict(accepted)
    assert hits == drive_hits(policy, acc, n)[0].sum()
    if "scratch" in policy:  # the scratch path ran both ways: admitted and dropped
        assert cache.scratch_admitted > 0 and cache.scratch_dropped > 0
    demote, _ = pass_verdict(acc, 0)
    assert isinstance(demote, list)


@pytest.mark.slow
def test_options_in_simulate():
    """γ = 1 rejects nothing: +demote is plain LRU there; γ = 4 with α < 1 demotes."""
    trace = synthetic_trace(200, n_layers=4, n_experts=32, top_k=4, seed=5)
    pols = ["lru", "lru+demote", "lru+protect", "sieve", "s3fifo", "belady"]
    rows = simulate(trace, pols, [Budget(slots=40)], gammas=[1, 4], alphas=[0.6])
    r = {(x.policy, x.gamma): x for x in rows}
    assert r["lru+demote", 1].hits == r["lru", 1].hits
    assert r["lru+demote", 4].hits != r["lru", 4].hits
    for p in pols:
        assert r["belady", 4].misses <= r[p, 4].misses
    with pytest.raises(SpecdecError, match="unknown policy"):
        simulate(trace, ["belady+demote"], [Budget(slots=40)])


@pytest.fixture(scope="module")
def tiny():
    sm = load("tiny", budget="10%", io="direct")
    prompt = sm.tokenizer.encode("import os\nimport sys\n\ndef main(argv):\n    ")
    ref = generate(sm, prompt, "none", DecodeConfig(max_tokens=48), stop_at_eos=False).tokens
    yield sm, prompt, ref
    sm.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "policy", ["lru+demote+protect", "sieve+demote+protect", "s3fifo+demote+protect"]
)
def test_decoding_stays_lossless(tiny, policy):
    sm, prompt, ref = tiny
    sm.policy = PolicySpec.parse(policy)
    try:
        for drafter in ("oracle:0.6", "self"):
            sm.reset_cache()
            res = generate(
                sm, prompt, drafter, DecodeConfig(gamma=4, max_tokens=48), stop_at_eos=False
            )
            assert res.tokens == ref, (policy, drafter)
            assert res.summary["misses"] > 0
            if drafter == "oracle:0.6":
                assert sm.streamer.cache.demoted > 0, "the verdict hook never demoted"
    finally:
        sm.policy = PolicySpec.parse("lru")
