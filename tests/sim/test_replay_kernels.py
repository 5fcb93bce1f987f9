"""The compiled replay loops equal the Python policy classes, access by access.

pytest tests/sim/test_replay_kernels.py

specdec.sim.kernels replays the runtime's policies (specdec.cache.policies, driven through
ExpertCache) for speed; the classes are the specification. Random traces with per-position
counts, ticks every few steps and sequence restarts: every access must hit or miss alike.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import POLICIES, make_policy
from specdec.sim.bounds import Belady
from specdec.sim.replay import Access, policy_hits


def _python_hits(name, acc: Access, n, hotlist):
    steps = acc.steps()
    if name == "belady":
        pol = Belady(n, steps)
    else:
        pol = make_policy(name, n, hotlist=hotlist, scratch=acc.widest)
    cache = ExpertCache(n, pol)
    preload = [k for k, _ in cache.preload()]
    out = []
    counts = np.split(acc.counts, acc.ptr[1:-1])
    for s, ks in enumerate(steps):
        if acc.new_seq[s]:
            cache.new_sequence()
        missed = {k for k, _ in cache.access(ks, counts[s].tolist())}
        out += [k not in missed for k in ks]
        if acc.tick[s]:
            cache.tick(int(acc.tick[s]))
    return out, preload


@st.composite
def accesses(draw):
    n_keys = draw(st.integers(2, 24))
    n_steps = draw(st.integers(1, 80))
    steps = [
        sorted(draw(st.sets(st.integers(0, n_keys - 1), min_size=1, max_size=6)))
        for _ in range(n_steps)
    ]
    acc = Access.from_steps(steps, n_keys)
    acc.counts = np.array(
        draw(st.lists(st.integers(1, 4), min_size=len(acc.keys), max_size=len(acc.keys))),
        dtype=np.int64,
    )
    every = draw(st.integers(1, 4))  # steps per forward call
    acc.tick = np.array(
        [draw(st.integers(1, 9)) if (s + 1) % every == 0 else 0 for s in range(n_steps)],
        dtype=np.int64,
    )
    acc.new_seq = np.array([s > 0 and draw(st.integers(0, 9)) == 0 for s in range(n_steps)])
    return acc


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    acc=accesses(),
    name=st.sampled_from([*POLICIES, "belady"]),
    extra=st.integers(0, 10),
    hot=st.permutations(range(24)),
    n_hot=st.integers(0, 24),
)
def test_kernels_equal_the_python_policies(acc, name, extra, hot, n_hot):
    n = acc.widest + extra
    hotlist = [k for k in hot if k < acc.n_keys][:n_hot]
    hit, preload = policy_hits(name, acc, n, hotlist)
    want, want_preload = _python_hits(name, acc, n, hotlist)
    assert hit.tolist() == want
    assert preload.tolist() == want_preload
