"""ExpertCache and its policies: invariants under random steps, and each policy's own rule.

pytest tests/cache/test_cache_policies.py
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import POLICIES, make_policy
from specdec.core.errors import BudgetError, SpecdecError
from tests.helpers import fast_cases

N_KEYS = 24


def _cache(name: str, n: int, **opts) -> ExpertCache:
    return ExpertCache(n, make_policy(name, n, **opts))


def _step(cache: ExpertCache, keys, counts=None):
    return cache.step(np.array(sorted(keys), dtype=np.int64), counts)


# One action: ("step", keys, counts) or ("prefetch", keys, exclude)
actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("step"),
            st.sets(st.integers(0, N_KEYS - 1), min_size=1, max_size=4),
            st.integers(1, 4),
        ),
        st.tuples(
            st.just("prefetch"),
            st.lists(st.integers(0, N_KEYS - 1), max_size=4),
            st.sets(st.integers(0, N_KEYS - 1), max_size=4),
        ),
    ),
    min_size=1,
    max_size=60,
)


@pytest.mark.parametrize("name", fast_cases(POLICIES))
@settings(max_examples=120, deadline=None)
@given(acts=actions, n_slots=st.integers(4, 10), hot=st.permutations(range(N_KEYS)))
def test_invariants_under_random_steps(name, acts, n_slots, hot):
    cache = _cache(name, n_slots, hotlist=list(hot[:8]), scratch=4)
    for k, s in cache.preload():
        assert cache.slot_of(k) == s
    for kind, keys, extra in acts:
        before = {k: cache.slot_of(k) for k in cache.resident_keys()}
        if name == "static":  # scratch reads of the last step are dropped when a step begins
            before = {k: s for k, s in before.items() if k in cache.policy.pinned}
        if kind == "prefetch":
            got = cache.prefetch(keys, exclude=extra)
            after = set(cache.resident_keys())
            assert all(k in after for k in extra if k in before), "prefetch evicted an excluded key"
            assert all(k not in before and cache.slot_of(k) == s for k, s in got)
        else:
            ks = sorted(keys)
            res = _step(cache, ks, np.full(len(ks), extra))
            after = {k: cache.slot_of(k) for k in cache.resident_keys()}
            assert res.slots.dtype == np.int32 and len(set(res.slots.tolist())) == len(ks)
            for k, s in zip(ks, res.slots.tolist(), strict=True):
                assert after[k] == s, "a key of the step is not resident in its slot"
                if k in before:
                    assert before[k] == s, "a hit moved"
            assert [k for k, _ in res.misses] == [k for k in ks if k not in before]
            assert not (set(before) - set(after)) & set(ks), "evicted a key of the current step"
        assert len(cache.resident_keys()) <= n_slots
        slots = [cache.slot_of(k) for k in cache.resident_keys()]
        assert len(set(slots)) == len(slots) and all(0 <= s < n_slots for s in slots)
        assert cache.hits + cache.misses == cache.accesses
        cache.tick(1)


def test_lru_evicts_least_recent_outside_the_step():
    c = _cache("lru", 3)
    for ks in ([1], [2], [3], [1], [4]):  # 2 is least recent when 4 arrives
        _step(c, ks)
    assert c.resident_keys() == [1, 3, 4] and c.evictions == 1
    res = _step(c, [2, 3])  # 3 is a hit; 1 is now least recent outside the step
    assert res.misses == [(2, res.slots[0])] and c.resident_keys() == [2, 3, 4]


def test_step_order_hits_before_misses():
    # 1 hits, 0 misses in step {0, 1}: 0 is admitted after 1 is touched, so 1 is older.
    c = _cache("lru", 2)
    for ks in ([1], [0, 1], [2]):
        _step(c, ks)
    assert c.resident_keys() == [0, 2]


def test_slru_promotes_only_on_demand_hit():
    c = _cache("slru", 4, protected=2)
    pol = c.policy
    _step(c, [1, 2])
    assert list(pol.probation) == [1, 2] and not pol.protected
    c.prefetch([3])
    assert 3 not in pol.probation and 3 not in pol.protected  # held by the cache until hit
    _step(c, [1, 3])  # demand hits: 1 from probation, 3 from prefetch
    assert set(pol.protected) == {1, 3} and list(pol.probation) == [2]
    assert c.prefetch_hits == 1 and c.hits == 2
    _step(c, [2])  # promoting 2 overflows protected (2): its oldest, 1, is demoted
    assert list(pol.protected) == [3, 2] and list(pol.probation) == [1]
    for k in (5, 6, 7, 8, 9):  # a scan of one-time keys never reaches protected
        _step(c, [k])
    assert list(pol.protected) == [3, 2]


def test_hotness_halves_every_16_positions():
    c = _cache("hotness", 3)
    _step(c, [1], np.array([3]))
    _step(c, [2], np.array([2]))
    assert c.policy.count == {1: 3, 2: 2}
    c.tick(15)
    assert c.policy.count == {1: 3, 2: 2}
    c.tick(1)  # 16 positions: integer halving, like ds4's `hotness >>= 1`
    assert c.policy.count == {1: 1, 2: 1}
    _step(c, [3], np.array([1]))
    _step(c, [4], np.array([1]))  # all tied at 1: the least recently used (1) goes
    assert c.resident_keys() == [2, 3, 4]
    c.tick(32)
    assert c.policy.count == {}  # 1 >> 2 == 0: counters of 0 are dropped


def test_hotness_keeps_hot_key_over_recent_ones():
    c = _cache("hotness", 2)
    _step(c, [1], np.array([5]))
    _step(c, [2])
    _step(c, [3])  # lowest hotness is 2 (1 vs 5): 2 goes although 1 is older
    assert c.resident_keys() == [1, 3]


def test_hotness_seeds_and_preloads_hotlist():
    c = _cache("hotness", 2, hotlist=[7, 5, 9])
    assert c.preload() == [(7, 0), (5, 1)]
    assert c.policy.count == {7: 3, 5: 2, 9: 1}
    assert _step(c, [5, 7]).misses == [] and c.hits == 2
    _step(c, [1], np.array([8]))
    assert c.policy.count == {7: 4, 5: 3, 9: 1, 1: 8}
    c.new_sequence()  # a prefill from position 0: back to the seeds, residents kept
    assert c.policy.count == {7: 3, 5: 2, 9: 1} and c.resident_keys() == [1, 7]


def test_lfu_counts_hits_since_admission():
    c = _cache("lfu", 2)
    for ks in ([1], [1], [1], [2], [3]):  # 2 has 0 hits, 1 has 2: 2 goes
        _step(c, ks)
    assert c.resident_keys() == [1, 3]


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(st.sets(st.integers(0, 15), min_size=1, max_size=3), min_size=1, max_size=50),
    hot=st.permutations(range(16)),
    preload=st.booleans(),
)
def test_static_never_keeps_a_miss(steps, hot, preload):
    c = _cache("static", 8, hotlist=list(hot), scratch=3, preload=preload)
    pinned = set(hot[:5])
    assert c.policy.pinned == pinned
    c.preload()
    for ks in steps:
        res = _step(c, ks)
        missed = {k for k, _ in res.misses}
        hits = set(ks) - missed
        assert hits <= pinned, "static hit a key it does not pin"
        assert c.evictions == 0


def test_static_scratch_bounds_the_step():
    c = _cache("static", 10, hotlist=list(range(20)), scratch=4)
    assert c.max_step == 4
    with pytest.raises(BudgetError, match="scratch>=5"):
        _step(c, [0, 1, 2, 3, 4])


def test_wide_step_names_minimum_slots():
    c = _cache("lru", 4)
    with pytest.raises(BudgetError, match="at least 5 slots"):
        _step(c, [1, 2, 3, 4, 5])


def test_unknown_policy_lists_valid_names():
    with pytest.raises(SpecdecError, match="lru, slru, hotness, lfu, static"):
        make_policy("arc", 8)


def test_prefetch_evicted_first_and_counted_wasted():
    c = _cache("lru", 3)
    _step(c, [1, 2])
    assert c.prefetch([3, 1]) == [(3, 2)]  # 1 is resident: not read again
    _step(c, [4])  # full: the unhit prefetch 3 goes before the older demand keys
    assert c.resident_keys() == [1, 2, 4] and c.prefetch_wasted == 1
    got = c.prefetch(np.array([5, 6]), exclude=np.array([1, 2, 4]))  # no victim allowed
    assert got == [] and c.resident_keys() == [1, 2, 4]
    got = c.prefetch(np.array([5, 6]), exclude=np.array([2, 4]))  # the runtime passes arrays
    assert got == [(5, c.slot_of(5))] and c.resident_keys() == [2, 4, 5]  # 1 was oldest
    assert all(type(k) is int for k in c.resident_keys())


def test_policies_are_found_by_name_with_their_options():
    """Every conf/cache option names a registered policy; a new policy is one registered class."""
    from dataclasses import dataclass
    from pathlib import Path

    from specdec.cache.policies import REGISTRY, register
    from specdec.cache.policies.lru import LRU

    conf = Path(__file__).resolve().parents[2] / "conf" / "cache"
    assert {p.stem for p in conf.glob("*.yaml")} <= set(POLICIES) == set(REGISTRY)
    assert make_policy("slru", 10, protected=4, hotlist=[1]).protected_cap == 4  # others ignored

    @dataclass(frozen=True)
    class FifoOptions:
        pass

    @register
    class Fifo(LRU):
        name = "fifo-test"
        Options = FifoOptions

        def hit(self, keys):
            pass  # arrival order only

    try:
        assert isinstance(make_policy("fifo-test", 4), Fifo)
    finally:
        del REGISTRY["fifo-test"]
