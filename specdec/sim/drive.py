"""Replay an access sequence through the runtime's own ExpertCache and policy classes.

    from specdec.sim.drive import drive_hits
    hit, preloaded = drive_hits("sieve+demote+protect", acc, n_slots=1130)

The path for policies without a compiled loop (specdec.sim.kernels): sieve, s3fifo, and any
policy with speculation-aware options (+demote, +protect, +scratch; specdec.cache.speculative).
After each pass's last step (its tick) the cache hears the pass's verdict, computed by the
runtime's `verdict_keys` from the pass's routing in `acc.routes`: the first 1 + accepted
positions are the committed ones; with +scratch each verify step first names its first
position's keys, and the pass's scratch keys are resolved after its verdict. Python speed
(about 1 M accesses/s): fine for the studies in analysis/.
"""

from __future__ import annotations

import numpy as np

from specdec.cache.spec import PolicySpec
from specdec.cache.speculative import verdict_keys


def drive_hits(
    policy: PolicySpec | str, acc, n_slots: int, hotlist: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(hit [N] bool, keys preloaded) of `policy` (NAME[+options]) over `acc` (replay.Access)."""
    spec = PolicySpec.parse(policy)
    cache = spec.cache(n_slots, hotlist=hotlist, scratch=max(1, acc.widest))
    pre = np.array([k for k, _ in cache.preload()], np.int64)
    keys, ptr = acc.keys, acc.ptr.tolist()
    counts, ticks, new_seq = acc.counts, acc.tick.tolist(), acc.new_seq.tolist()
    hit = np.ones(len(keys), bool)
    judge = bool(spec.options) and acc.routes is not None
    scratch = judge and spec.options.scratch
    n_layers = acc.routes.shape[2] if judge else 0
    p = 0
    for s in range(len(ptr) - 1):
        a, b = ptr[s], ptr[s + 1]
        if new_seq[s]:
            cache.new_sequence()
        if scratch and acc.plan[p, 1] > 1:  # a verify step: its first position's keys
            cache.speculative(acc.routes[p, 0, s % n_layers])
        ks = keys[a:b]
        missed = cache.access(ks.tolist(), counts[a:b].tolist())
        if missed:
            hit[a + np.searchsorted(ks, [k for k, _ in missed])] = False
        if ticks[s]:
            cache.tick(ticks[s])
            if judge:
                cache.judge(*pass_verdict(acc, p))
            if scratch:
                cache.resolve_scratch(committed(acc, p))
            p += 1
    return hit, pre


def pass_verdict(acc, p: int) -> tuple[list[int], list[int]]:
    """(demote, protect) keys of pass p of `acc`, as the runtime computes them."""
    _, live, accepted = acc.plan[p].tolist()
    rows = acc.routes[p, :live]  # [live, L, k]
    return verdict_keys([(0, rows.reshape(live, -1))], accepted + 1)


def committed(acc, p: int) -> set[int]:
    """The keys pass p's committed positions (its first 1 + accepted) selected."""
    _, _, accepted = acc.plan[p].tolist()
    rows = acc.routes[p, : accepted + 1]  # [1 + accepted, L, k]
    return set(rows[rows >= 0].tolist())
