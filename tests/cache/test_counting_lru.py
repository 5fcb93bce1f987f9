"""CountingLRU and BatchedLRU: the shadows' plain LRU misses and orders exactly as an
ExpertCache of policy `lru` does, step for step, and is used only where the cache is one.

pytest tests/cache/test_counting_lru.py
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.batched_lru import BatchedLRU
from specdec.cache.counting_lru import BATCH_LAYERS, CountingLRU, counting
from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.cache.spec import PolicySpec
from specdec.core.errors import BudgetError
from specdec.gamma.shadows import divergence


def _preloaded(cls, slots: int):
    """(rng, a counting cache of `cls`, an LRU ExpertCache), both preloaded with the same keys."""
    rng = np.random.default_rng(slots)
    ours, theirs = cls(make_policy("lru", slots)), ExpertCache(slots, make_policy("lru", slots))
    preload = rng.choice(3 * slots, min(slots, 5), replace=False).tolist()
    ours.preload(preload)
    theirs.preload(preload)
    assert ours.held_order() == theirs.held_order()
    return rng, ours, theirs


@pytest.mark.parametrize("slots", [1, 8, 40])
def test_it_misses_and_orders_as_an_lru_expert_cache_at_every_step(slots):
    # random steps of 1..slots distinct keys over a pool that makes both hits and evictions
    # common, a preload first: every step's misses (in order) and the held order after it equal
    rng, ours, theirs = _preloaded(CountingLRU, slots)
    for step in range(400):
        n = int(rng.integers(1, slots + 1))
        keys = sorted(rng.choice(3 * slots, n, replace=False).tolist())
        assert ours.access(keys) == [k for k, _ in theirs.access(keys)], step
        assert ours.held_order() == theirs.held_order(), step
        assert ours.resident_keys() == theirs.resident_keys(), step
        ours.tick(1)
        theirs.tick(1)
    run = ExpertCache(slots, make_policy("lru", slots))
    run.adopt(ours)  # a re-sync takes a counting shadow's state as it takes an ExpertCache's
    assert divergence(run, ours) == (0, True) == divergence(run, theirs)


@pytest.mark.parametrize("cls", [CountingLRU, BatchedLRU])
def test_a_step_wider_than_the_cache_is_refused_as_expert_cache_refuses_it(cls):
    cache = cls(make_policy("lru", 4))
    cache.access([9])
    with pytest.raises(BudgetError, match="selects 5 distinct experts but the cache has 4 slots"):
        cache.access([1, 2, 3, 4, 5])
    assert cache.held_order() == [9], "nothing of the refused step is held"


def test_only_a_plain_lru_is_counted():
    assert isinstance(counting(PolicySpec.parse("lru").cache(16)), CountingLRU)
    for spec in ("lfu", "lru+demote", "lru+scratch"):
        cache = PolicySpec.parse(spec).cache(16)
        assert counting(cache) is cache, spec
    held = PolicySpec.parse("lru").cache(16)
    held.access([1, 2])
    assert counting(held) is held  # a cache already holding keys keeps them


@pytest.mark.parametrize("slots", [1, 3, 8, 40, 200])
def test_a_batched_lru_misses_and_orders_as_an_lru_expert_cache_stepping_one_by_one(slots):
    # random forwards of 1..7 steps (a layer each: disjoint keys) over a pool that makes hits,
    # evictions of keys a later step selects, and (small caches) forwards that outgrow the
    # cache common; a preload first: every key's miss and the held order after each forward
    # equal an ExpertCache's taking the steps one after another
    rng, ours, theirs = _preloaded(BatchedLRU, slots)
    for forward in range(300):
        steps = [
            np.sort(rng.choice(3 * slots + 5, int(rng.integers(1, min(slots, 40) + 1)), False))
            + layer * 1000
            for layer in range(int(rng.integers(1, 8)))
        ]
        keys, step = np.concatenate(steps), np.repeat(np.arange(len(steps)), list(map(len, steps)))
        missed = ours.steps(keys, step, len(steps))
        want = []
        for s in steps:
            hit = {k for k, _ in theirs.access(s.tolist())}
            want += [k in hit for k in s.tolist()]
        assert missed.tolist() == want, forward
        assert ours.held_order() == theirs.held_order(), forward
        assert ours.resident_keys() == theirs.resident_keys(), forward
    keys = sorted(rng.choice(3 * slots + 5, min(slots, 4), replace=False).tolist())
    assert ours.access(keys) == [k for k, _ in theirs.access(keys)]
    run = ExpertCache(slots, make_policy("lru", slots))
    run.adopt(ours)  # a re-sync takes a batched shadow's state as it takes an ExpertCache's
    assert divergence(run, ours) == (0, True) == divergence(run, theirs)
    with pytest.raises(BudgetError, match=f"but the cache has {slots} slots"):
        ours.access(list(range(slots + 1)))


def test_a_plain_lru_of_many_layers_is_counted_in_batches():
    assert isinstance(counting(PolicySpec.parse("lru").cache(16), BATCH_LAYERS), BatchedLRU)
    assert isinstance(counting(PolicySpec.parse("lru").cache(16), BATCH_LAYERS - 1), CountingLRU)
    cache = PolicySpec.parse("lru+demote").cache(16)
    assert counting(cache, BATCH_LAYERS) is cache
