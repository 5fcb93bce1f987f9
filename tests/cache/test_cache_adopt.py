"""ExpertCache.adopt: a cache takes another's state (`--gamma auto`'s re-sync to plain's shadow).

pytest tests/cache/test_cache_adopt.py
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.core.errors import SpecdecError
from specdec.gamma.shadows import divergence


def _lru(n: int) -> ExpertCache:
    return ExpertCache(n, make_policy("lru", n))


def test_an_adopting_cache_reads_what_it_lacks_and_then_reads_alike():
    # a run and plain's shadow fed the same history, then the run reads a pass's drafts: after
    # adopting the shadow's state it reads exactly the blocks plain held and it lacked, and from
    # then on misses exactly as plain does, whatever it is asked
    rng = np.random.default_rng(0)
    for trial in range(20):
        run, plain = _lru(16), _lru(16)
        for _ in range(30):
            keys = sorted(rng.choice(48, 4, replace=False).tolist())
            assert len(run.access(keys)) == len(plain.access(keys))
        run.access(sorted(rng.choice(np.arange(48, 64), 6, replace=False).tolist()))
        lacked = set(plain.resident_keys()) - set(run.resident_keys())
        assert divergence(run, plain) == (len(lacked), False)
        reads = run.adopt(plain)
        assert {key for key, _ in reads} == lacked, trial
        assert len({slot for _, slot in reads}) == len(reads) and run.resync_reads == len(reads)
        assert divergence(run, plain) == (0, True)
        slots = [run.slot_of(k) for k in run.resident_keys()]
        assert sorted(slots) == sorted(set(slots)), "each key its own slot"
        for _ in range(60):
            keys = sorted(rng.choice(64, 4, replace=False).tolist())
            assert len(run.access(keys)) == len(plain.access(keys)), trial


def test_one_extra_key_costs_a_resynced_run_one_read_not_its_cache_size():
    # the case that makes the cache's size the reserve without re-sync (test_gamma_auto.py:
    # one key plain never read, then the old keys oldest first, costs the run all 16): re-synced
    # it costs the one block the run lost, and nothing after
    k = 16
    plain, run = _lru(k), _lru(k)
    for c in (plain, run):
        c.access(list(range(k)))
    run.access([k + 100])
    assert divergence(run, plain) == (1, False)
    assert [key for key, _ in run.adopt(plain)] == [0]
    extra = sum(len(run.access([key])) - len(plain.access([key])) for key in range(k))
    assert extra == 0


def test_only_a_cache_whose_order_is_its_state_adopts():
    other = _lru(8)
    other.access([1, 2, 3])
    sieve = ExpertCache(8, make_policy("sieve", 8))
    sieve.access([7, 8])
    with pytest.raises(SpecdecError, match="cannot take another cache's state"):
        sieve.adopt(other)
    assert sieve.resident_keys() == [7, 8], "refused before anything moved"
    with pytest.raises(SpecdecError, match="policy sieve has no order to take"):
        _lru(8).adopt(sieve)
    fetching = _lru(8)
    fetching.prefetch([5, 6])  # held outside the policy until a demand hit
    with pytest.raises(SpecdecError, match="outside its policy"):
        fetching.adopt(other)


def test_the_same_keys_in_another_order_are_not_plains_and_adopt_reads_nothing():
    # D counts blocks only; the order is state too: an LRU holding plain's keys in another order
    # evicts other keys than plain's next, so only adopting the order makes both read alike
    plain, run = _lru(4), _lru(4)
    plain.access([1, 2, 3, 4])
    run.access([4, 3, 2, 1])
    assert divergence(run, plain) == (0, False)
    assert run.adopt(plain) == [] and divergence(run, plain) == (0, True)
    assert run.held_order() == [1, 2, 3, 4]
    big = _lru(6)
    big.access([1, 2, 3, 4, 5, 6])
    with pytest.raises(SpecdecError, match="cannot take one holding 6 keys"):
        run.adopt(big)
