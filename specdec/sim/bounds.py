"""Offline bounds and the one-pass LRU curve, on a step sequence (one list of keys per step).

    from specdec.sim.bounds import Belady, knapsack_bound, lru_curve_steps
    cache = ExpertCache(96, Belady(96, steps))            # replay `steps` through it, in order
    hits = lru_curve_steps(steps, [32, 64, 96])           # == one LRU replay per budget

Steps follow ExpertCache's semantics (specdec/cache/expert_cache.py): sorted distinct keys, hits
touched ascending, then misses admitted ascending, victims never from the current step.

One-pass LRU. Under these semantics the cache of n slots holds, before each step, exactly the n
most recent keys by the order the n-slot cache itself recorded (induction: the step's keys become
the newest and the oldest non-step keys go). A key of step t last seen at step t' therefore hits
iff D + W(n) < n, where D = distinct keys seen in steps strictly between t' and t (independent of
n) and W(n) = keys of step t' not seen since that the n-slot cache ordered after this key. W
depends on n because hits are touched before misses: in step t' a key that missed at n is newer
than one that hit. So LRU is NOT a stack algorithm here (a key can hit at n slots and miss at
n + 1; tests/sim/test_simulate_lru_curve.py shows one), and one stack distance per access is not
enough. Instead each access gets its exact set of hitting budgets: all n >= D + |R| + 1 (R = the
keys of t' not seen since), plus those n in [D + 1, D + |R|] where D + W(n) < n, evaluated from
the stored hit sets of step t'. Only budgets of the requested list are evaluated, so the work per
access is a few bisects plus a loop over step t' when a budget falls in that narrow window.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

from specdec.cache.policies import Policy
from specdec.core.errors import BudgetError

NEVER = 1 << 62  # "next use" of a key that is never selected again


def next_uses(steps: Sequence[list[int]]) -> list[list[int]]:
    """For every key of every step, the index of the next step that selects it (or NEVER)."""
    seen: dict[int, int] = {}
    out: list[list[int]] = [[]] * len(steps)
    for i in range(len(steps) - 1, -1, -1):
        ks = steps[i]
        out[i] = [seen.get(k, NEVER) for k in ks]
        for k in ks:
            seen[k] = i
    return out


class Belady(Policy):
    """Belady's MIN under the step semantics: evict the non-step key used again farthest ahead.

    Offline: built with the whole step sequence and must be driven through exactly those steps,
    in order. A max-heap of (next use, key) with lazy deletion: an entry is live while the key is
    resident with that next use.
    """

    name = "belady"
    uses_select = True  # select() marks each step boundary and brings the keys' next uses

    def __init__(self, n_slots: int, steps: Sequence[list[int]]):
        super().__init__(n_slots)
        self._next = next_uses(steps)
        self._i = 0
        self._pending: dict[int, int] = {}
        self._resident: dict[int, int] = {}  # key -> its next use
        self._heap: list[tuple[int, int]] = []  # (-next use, key)

    def select(self, keys, counts):
        nxt = self._next[self._i]
        if len(nxt) != len(keys):
            raise ValueError(f"Belady driven off its step sequence at step {self._i}")
        self._pending = dict(zip(keys, nxt, strict=True))
        self._i += 1

    def hit(self, keys):
        res, pend, heap = self._resident, self._pending, self._heap
        for k in keys:
            n = res[k] = pend[k]
            heapq.heappush(heap, (-n, k))

    def admit(self, keys):
        self.hit(keys)
        return ()

    def remove(self, keys):
        for k in keys:  # its heap entries go stale: victims() skips keys not resident
            self._resident.pop(k, None)

    def victims(self, n, exclude, in_step=False):
        out, kept = [], []
        heap, res = self._heap, self._resident
        while len(out) < n and heap:
            entry = heapq.heappop(heap)
            k = entry[1]
            if res.get(k) != -entry[0]:
                continue
            if k in exclude:
                kept.append(entry)
                continue
            del res[k]
            out.append(k)
        for entry in kept:
            heapq.heappush(heap, entry)
        return out


def knapsack_bound(
    steps: Sequence[list[int]], budget_bytes: int, bytes_of: dict[int, int] | None = None
) -> tuple[float, float]:
    """Ceiling of any static pinning with hindsight: (hits, bytes_read).

    Count the selections of each key over the steps, then solve the fractional knapsack of
    selections per byte at `budget_bytes`: no pinning chosen from the trace itself, preloaded,
    can hit more. `bytes_of` maps key -> expert bytes (default: 1 byte each, i.e. slots).
    """
    counts: dict[int, int] = {}
    for ks in steps:
        for k in ks:
            counts[k] = counts.get(k, 0) + 1
    keys = list(counts)
    c = np.array([counts[k] for k in keys], dtype=np.float64)  # [K]
    b = np.array([1 if bytes_of is None else bytes_of[k] for k in keys], dtype=np.float64)  # [K]
    return knapsack_counts(c, b, budget_bytes)


def knapsack_counts(c: np.ndarray, b: np.ndarray, budget_bytes: float) -> tuple[float, float]:
    """knapsack_bound from selections c [K] and bytes b [K] per key: (hits, bytes_read)."""
    c, b = np.asarray(c, np.float64), np.asarray(b, np.float64)
    order = np.argsort(-c / b, kind="stable")
    c, b = c[order], b[order]
    full = np.cumsum(b) <= budget_bytes
    n_full = int(full.sum())
    hits = float(c[:n_full].sum())
    left = budget_bytes - float(b[:n_full].sum())
    pinned_bytes = float((c[:n_full] * b[:n_full]).sum())
    if n_full < len(c) and left > 0:
        frac = left / b[n_full]
        hits += float(frac * c[n_full])
        pinned_bytes += float(frac * c[n_full] * b[n_full])
    return hits, float((c * b).sum()) - pinned_bytes


def lru_curve_steps(
    steps: Sequence[list[int]], budgets: Sequence[int], group_size: int | None = None
) -> np.ndarray:
    """LRU hits at every budget (slots) in one pass; equals one replay per budget exactly.

    Returns [len(budgets)] hits, or [len(budgets), G] hits per key group (key // group_size,
    e.g. per layer with group_size = n_experts) when group_size is given.
    """
    widest = max((len(ks) for ks in steps), default=0)
    if budgets and min(budgets) < widest:
        raise BudgetError(
            f"budget of {min(budgets)} slots is below the widest step ({widest} experts): "
            f"use at least {widest} slots"
        )
    bl = sorted(set(int(n) for n in budgets))
    bidx = {n: i for i, n in enumerate(bl)}
    top = bl[-1] if bl else 0
    n_groups = (
        1
        if group_size is None
        else max((k for ks in steps for k in ks), default=0) // group_size + 1
    )
    first = np.zeros((n_groups, len(bl) + 1), dtype=np.int64)  # [G, B + 1]: first hitting budget
    extra = np.zeros((n_groups, len(bl)), dtype=np.int64)  # [G, B]: hits below that one
    last: dict[int, tuple[int, int, tuple[int, ...]]] = {}  # key -> (step, T, E) of last access
    stamps: list[int] = []  # last-access step of every key seen, sorted (one entry per key)
    inf = (NEVER, ())
    for t, ks in enumerate(steps):
        sets = []
        for k in ks:
            info = last.get(k)
            if info is None:
                sets.append(inf)
                continue
            tp, tk, ek = info
            d = len(stamps) - bisect_right(stamps, tp)
            if d >= top:
                sets.append(inf)  # misses at every budget asked
                continue
            rest = []
            for j in steps[tp]:
                if j != k:
                    ij = last[j]
                    if ij[0] == tp:
                        rest.append((j > k, ij[1], ij[2]))
            r = len(rest)
            window = bl[bisect_left(bl, d + 1) : bisect_right(bl, d + r)]
            ext = []
            for n in window:
                khit = n >= tk or n in ek
                w = 0
                for newer_key, tj, ej in rest:
                    jmiss = n < tj and n not in ej
                    # newer than k in step t' at n slots: misses come after hits, ties by key
                    w += (jmiss or newer_key) if khit else (jmiss and newer_key)
                if d + w < n:
                    ext.append(n)
            sets.append((d + r + 1, tuple(ext)))
        for k, (tk, ek) in zip(ks, sets, strict=True):
            info = last.get(k)
            if info is not None:
                del stamps[bisect_left(stamps, info[0])]
            last[k] = (t, tk, ek)
            stamps.append(t)
            g = 0 if group_size is None else k // group_size
            first[g, bisect_left(bl, tk)] += 1
            for n in ek:
                extra[g, bidx[n]] += 1
    hits = np.cumsum(first[:, :-1], axis=1) + extra  # [G, B]
    out = hits[:, [bidx[int(n)] for n in budgets]].T  # [len(budgets), G]
    return out[:, 0] if group_size is None else out


def opt_bypass_hits(steps: Sequence[list[int]], n_slots: int, warm: bool = True) -> tuple[int, int]:
    """(hits, keys preloaded) of the offline optimum with bypass, a bound for every policy.

    A miss is read into scratch (outside the n_slots) and kept only if that pays: after each
    step the cache holds the n_slots keys of (cache | step) used again soonest, which minimises
    misses (the exchange argument of Belady's MIN, with a step as one instant; a test checks it
    against an exhaustive search over cache contents). Every step-semantics policy at n_slots
    (static's scratch slots inside them) is one of the schedules it ranges over, and warm (the
    n_slots keys used first, preloaded for free) covers hotlist preloads, so its misses are at
    most any policy's misses, and its hits at least the knapsack bound's with equal sizes.
    """
    from specdec.sim.kernels import bypass_opt_hits
    from specdec.sim.replay import Access, first_used

    acc = Access.from_steps([sorted(set(ks)) for ks in steps])
    init = first_used(acc, n_slots) if warm else acc.keys[:0]
    hit = bypass_opt_hits(acc.keys, acc.ptr, n_slots, acc.n_keys, init)
    return int(hit.sum()), len(init)
