"""PooledCache (mixed precision's two pools behind one slot space): what it reads of its pools.

pytest tests/cache/test_pooled_cache.py
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import make_policy
from specdec.cache.pooled import PooledCache
from specdec.cache.speculative import NO_SPEC, SpecOptions

IS_COLD = np.array([False] * 4 + [True] * 4)  # keys 0-3 hot, 4-7 cold


def _pool(n: int, policy: str = "lru", spec=NO_SPEC, **opts) -> ExpertCache:
    return ExpertCache(n, make_policy(policy, n, **opts), spec)


def test_block_slots_refuses_a_block_holding_a_transient_read():
    # static pins key 4 and reads any other cold key into its one scratch slot for one step
    cold = _pool(2, "static", hotlist=[4], scratch=1)
    cache = PooledCache(_pool(4), cold, IS_COLD)
    cache.preload()
    cache.access([0, 1, 2, 3])
    cache.access([5])
    assert cold.transient == [5] and list(cache.hot.transient) == []
    assert cache.block_slots(4, 2) is None  # key 5 leaves its slot at the next step
    assert cache.block_slots(0, 4) is None  # while any pool holds one, no block is trusted
    cache.access([4])  # the next step frees the scratch read
    assert list(cold.transient) == [] and cache.block_slots(4, 2) is None  # 5 is gone
    assert cache.block_slots(4, 1).tolist() == [4 + cold.slot_of(4)]
    assert cache.block_slots(0, 4).tolist() == [cache.hot.slot_of(k) for k in range(4)]
    with pytest.raises(AttributeError):
        cold.transient = ()  # read-only: the cache alone moves keys in and out of slots


@pytest.mark.parametrize("spec", [NO_SPEC, SpecOptions(demote=True, protect=True)])
def test_noting_is_the_one_spec_both_pools_share(spec):
    cache = PooledCache(_pool(4, spec=spec), _pool(2, spec=spec), IS_COLD)
    assert cache.noting == bool(spec) and cache.spec == spec
    with pytest.raises(ValueError, match="one speculation option set"):
        PooledCache(_pool(4, spec=spec), _pool(2, spec=SpecOptions(protect=not spec)), IS_COLD)
