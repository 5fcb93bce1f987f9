"""+scratch: a verify pass's drafted-only misses read into scratch slots, resolved at the verdict.

pytest tests/cache/test_scratch_cache.py

- The cache: scratch keys are outside the policy until the verdict, committed ones are then
  admitted without a second read (the scratch slot becomes the cache's), rejected ones dropped;
  a step with more drafted-only misses than free scratch slots admits the rest as usual.
- The runtime's path (the streamer's notes, the loop's verdict) and the replay's (drive_hits over
  the pass's routes) give the same hits.
- Decoding stays exact: greedy tokens with +scratch equal plain greedy, scratch used.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.cache.spec import PolicySpec
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.stream.loader import load


def _pass(cache, rows: list[list[int]]) -> list[tuple[int, int]]:
    """One verify step of one layer (base 0) whose positions selected `rows`."""
    cache.note(0, np.array([rows]))  # the streamer's [1, γ, k]
    return cache.access(sorted({k for r in rows for k in r}))


def test_scratch_admits_committed_and_drops_rejected_without_a_second_read():
    cache = PolicySpec.parse("lru+scratch").cache(16)  # 14 policy slots + 2 scratch
    assert (cache.n_slots, cache.n_scratch) == (14, 2)
    misses = dict(_pass(cache, [[1, 2], [3, 4]]))  # position 0 commits 1, 2; 3, 4 drafted only
    assert sorted(misses) == [1, 2, 3, 4]
    assert {misses[3], misses[4]} == {14, 15}, "drafted-only misses read into the scratch slots"
    assert sorted(cache.policy.order) == [1, 2], "scratch keys stay outside the policy"
    cache.verdict(1)  # the draft was accepted: 3 and 4 were committed
    assert sorted(cache.policy.order) == [1, 2, 3, 4]
    assert (cache.slot_of(3), cache.slot_of(4)) == (misses[3], misses[4]), "no copy, no read"
    assert cache.access([3, 4]) == [], "admitted from the scratch copy: hits"
    assert cache.scratch_admitted == 2 and cache.misses == 4

    misses = dict(_pass(cache, [[1, 5], [6, 7]]))
    assert sorted(misses) == [5, 6, 7]
    assert sorted(k for k in (6, 7) if cache.slot_of(k) is not None) == [6, 7]
    assert sorted(cache.policy.order) == [1, 2, 3, 4, 5], "6 and 7 in scratch only"
    cache.verdict(0)  # rejected: 6 and 7 dropped
    assert cache.slot_of(6) is None and cache.slot_of(7) is None
    assert sorted(cache.policy.order) == [1, 2, 3, 4, 5]
    assert cache.scratch_dropped == 2

    misses = dict(_pass(cache, [[1, 2], [8, 9], [10, 11]]))  # 4 drafted-only misses, 2 scratch
    assert len(misses) == 4 and cache.scratch_reads == 6, "2 to scratch, the rest admitted"
    cache.verdict(2)
    assert {8, 9, 10, 11} <= set(cache.policy.order)
    assert cache.stats()["n_scratch"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru+scratch", "s3fifo+protect+scratch"])
def test_decoding_with_scratch_stays_lossless(policy):
    sm = load("tiny", budget="10%", io="direct", policy=policy)
    try:
        prompt = sm.tokenizer.encode("import os\nimport sys\n\ndef main(argv):\n    ")
        ref = generate(sm, prompt, "none", DecodeConfig(max_tokens=48), stop_at_eos=False).tokens
        for drafter in ("oracle:0.6", "mtp"):
            sm.reset_cache()
            res = generate(
                sm, prompt, drafter, DecodeConfig(gamma=4, max_tokens=48), stop_at_eos=False
            )
            assert res.tokens == ref, (policy, drafter)
            c = sm.streamer.cache
            assert c.scratch_reads > 0 and c.scratch_admitted > 0, (policy, drafter)
            held = res.summary["cache_counters"]["n_scratch"]  # the summary says the size
            assert held == res.summary["cache_slots"] // 8 == c.n_scratch > 0
    finally:
        sm.close()
