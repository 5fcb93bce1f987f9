"""ExpertCache.forget (a read failed) keeps every cache invariant, for every policy.

Run: `pytest tests/cache/test_cache_forget.py`. Hypothesis interleaves steps, lookahead prefetches and
forgets (of resident, prefetched, scratch and absent keys). After every action: no more keys than
slots, each slot held by at most one key, free + held slots = all slots, hits + misses = accesses,
a step's keys are all resident in the slots it returned, a forgotten key is not resident and is a
miss on its next access, and the policy never hands out a forgotten key as a victim (which would
free a slot twice).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import POLICIES, make_policy
from tests.helpers import fast_cases

N_KEYS = 20
keysets = st.sets(st.integers(0, N_KEYS - 1), min_size=1, max_size=4)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("step"), keysets),
        st.tuples(st.just("prefetch"), keysets),
        st.tuples(st.just("forget"), keysets),
        st.tuples(st.just("forget_last_step"), st.just(frozenset())),
    ),
    min_size=1,
    max_size=60,
)


def check_slot_table(cache: ExpertCache) -> None:
    held = [cache.slot_of(k) for k in cache.resident_keys()]
    assert len(held) <= cache.n_slots
    assert len(set(held)) == len(held), "two keys share a slot"
    assert sorted(held + cache._free) == list(range(cache.n_slots)), "a slot is lost or doubled"
    assert cache.hits + cache.misses == cache.accesses


@pytest.mark.parametrize("name", fast_cases(POLICIES))
@settings(max_examples=80, deadline=None)
@given(acts=actions, n_slots=st.integers(4, 8), hot=st.permutations(range(N_KEYS)))
def test_forget_keeps_the_invariants(name, acts, n_slots, hot):
    cache = ExpertCache(n_slots, make_policy(name, n_slots, hotlist=list(hot[:6]), scratch=4))
    cache.preload()
    last_step: list[int] = []
    forgotten: set[int] = set()
    for kind, keys in acts:
        if kind == "step":
            ks = sorted(keys)
            misses_before = cache.misses
            res = cache.step(np.array(ks, dtype=np.int64))
            assert [cache.slot_of(k) for k in ks] == res.slots.tolist()
            missed = {k for k, _ in res.misses}
            assert forgotten & set(ks) <= missed, "a forgotten key was served as a hit"
            assert cache.misses - misses_before == len(missed)
            forgotten -= set(ks)
            last_step = ks
        elif kind == "prefetch":
            for k, s in cache.prefetch(sorted(keys), exclude=last_step):
                assert cache.slot_of(k) == s
                forgotten.discard(k)
        else:
            ks = last_step if kind == "forget_last_step" else sorted(keys)
            resident = {k for k in ks if cache.slot_of(k) is not None}
            assert cache.forget(ks) == len(resident)
            assert all(cache.slot_of(k) is None for k in ks)
            forgotten |= set(ks)
        check_slot_table(cache)
        cache.tick(1)
