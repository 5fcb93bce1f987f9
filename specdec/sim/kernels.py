"""Compiled replay loops (numba) of the cache policies and offline bounds, for the simulator.

    from specdec.sim.kernels import replay_hits
    hit = replay_hits("lru", keys, ptr, n_slots=96, n_keys=L * E)   # [N] bool, one per access

An access sequence is flat: `keys` [N] int64, the sorted distinct keys of every step in order,
and `ptr` [S + 1], step s being keys[ptr[s]:ptr[s + 1]]. Optional per-step arrays drive the
policies with per-position state: `counts` [N] (positions of the call selecting each key: hotness
adds them), `tick` [S] (positions to tick after step s, 0 between the steps of one call) and
`new_seq` [S] (new_sequence() before step s). Every kernel follows ExpertCache.access exactly:
hits touched ascending, victims picked among resident keys not in the step, misses admitted
ascending; tests/sim/test_replay_kernels.py checks hits per access against the Python policy classes
(which remain the runtime's) on random traces. The classes are the specification; these loops
exist because Python replays 1-2 M accesses/s and the MiniMax-scale study needs 5 M+.

Compiled once and cached on disk next to this file (numba `cache=True`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEVER = 1 << 62


# -- doubly linked lists over keys (LRU, SLRU): node K + j is list j's sentinel ---------------


@njit(cache=True, inline="always")
def _unlink(prv, nxt, k):
    p, n = prv[k], nxt[k]
    nxt[p] = n
    prv[n] = p


@njit(cache=True, inline="always")
def _append(prv, nxt, head, k):
    last = prv[head]
    nxt[last] = k
    prv[k] = last
    nxt[k] = head
    prv[head] = k


@njit(cache=True)
def lru_hits(keys, ptr, n_slots, n_keys):
    K = n_keys
    prv = np.full(K + 1, K, np.int64)
    nxt = np.full(K + 1, K, np.int64)
    res = np.zeros(K, np.bool_)
    hit = np.zeros(keys.shape[0], np.bool_)
    size = 0
    for s in range(ptr.shape[0] - 1):
        a, b = ptr[s], ptr[s + 1]
        m = 0
        for i in range(a, b):
            k = keys[i]
            if res[k]:
                hit[i] = True
                _unlink(prv, nxt, k)
                _append(prv, nxt, K, k)
            else:
                m += 1
        # the step's hits are now the newest: the oldest keys are never in the step
        for _ in range(m - (n_slots - size)):
            v = nxt[K]
            _unlink(prv, nxt, v)
            res[v] = False
            size -= 1
        for i in range(a, b):
            if not hit[i]:
                k = keys[i]
                _append(prv, nxt, K, k)
                res[k] = True
                size += 1
    return hit


@njit(cache=True)
def _pop_oldest(prv, nxt, seg, head, n, instep, s):
    """Evict up to n keys of list `head` from its old end, skipping keys of step s."""
    got = 0
    v = nxt[head]
    while got < n and v != head:
        after = nxt[v]
        if instep[v] != s:
            _unlink(prv, nxt, v)
            seg[v] = 0
            got += 1
        v = after
    return got


@njit(cache=True)
def slru_hits(keys, ptr, n_slots, n_keys, protected_cap):
    K = n_keys
    PROB, PROT = K, K + 1
    prv = np.empty(K + 2, np.int64)
    nxt = np.empty(K + 2, np.int64)
    prv[PROB] = nxt[PROB] = PROB
    prv[PROT] = nxt[PROT] = PROT
    seg = np.zeros(K, np.int8)  # 0 absent, 1 probation, 2 protected
    instep = np.full(K, -1, np.int64)
    hit = np.zeros(keys.shape[0], np.bool_)
    size = n_prot = 0
    for s in range(ptr.shape[0] - 1):
        a, b = ptr[s], ptr[s + 1]
        m = 0
        for i in range(a, b):
            k = keys[i]
            instep[k] = s
            if seg[k] == 0:
                m += 1
                continue
            hit[i] = True
            _unlink(prv, nxt, k)
            if seg[k] == 1:
                seg[k] = 2
                n_prot += 1
            _append(prv, nxt, PROT, k)
            if n_prot > protected_cap:  # overflow: protected's oldest back to probation
                v = nxt[PROT]
                _unlink(prv, nxt, v)
                _append(prv, nxt, PROB, v)
                seg[v] = 1
                n_prot -= 1
        need = m - (n_slots - size)
        if need > 0:
            got = _pop_oldest(prv, nxt, seg, PROB, need, instep, s)
            got2 = _pop_oldest(prv, nxt, seg, PROT, need - got, instep, s)
            n_prot -= got2
            size -= got + got2
        for i in range(a, b):
            if not hit[i]:
                k = keys[i]
                _append(prv, nxt, PROB, k)
                seg[k] = 1
                size += 1
    return hit


# -- binary min-heaps on parallel arrays, ordered by (p1, p2) ---------------------------------


# (written with a moving hole and no helper calls: numba runs this form ~14x faster)


@njit(cache=True)
def _sift_down(h1, h2, hk, n, i):
    a1, a2, ak = h1[i], h2[i], hk[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (h1[c + 1] < h1[c] or (h1[c + 1] == h1[c] and h2[c + 1] < h2[c])):
            c += 1
        if not (h1[c] < a1 or (h1[c] == a1 and h2[c] < a2)):
            break
        h1[i], h2[i], hk[i] = h1[c], h2[c], hk[c]
        i = c
    h1[i], h2[i], hk[i] = a1, a2, ak


@njit(cache=True)
def _push(h1, h2, hk, n, p1, p2, k):
    """Add (p1, p2, k) to a heap of n entries; returns n + 1."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if not (p1 < h1[p] or (p1 == h1[p] and p2 < h2[p])):
            break
        h1[i], h2[i], hk[i] = h1[p], h2[p], hk[p]
        i = p
    h1[i], h2[i], hk[i] = p1, p2, k
    return n + 1


@njit(cache=True)
def _pop(h1, h2, hk, n):
    """Remove the top; returns the new size (the top's values must be read before)."""
    n -= 1
    h1[0], h2[0], hk[0] = h1[n], h2[n], hk[n]
    _sift_down(h1, h2, hk, n, 0)
    return n


# -- hotness and lfu (CountPolicy) ------------------------------------------------------------


@njit(cache=True)
def _rebuild(h1, h2, hk, count, last, res):
    n = 0
    for k in range(res.shape[0]):
        if res[k]:
            h1[n], h2[n], hk[n] = count[k], last[k], k
            n += 1
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(h1, h2, hk, n, i)
    return n


@njit(cache=True)
def count_hits(
    keys, ptr, counts, tick, new_seq, n_slots, n_keys, count_selects, decay_every, seed, preload
):
    """hotness (count_selects) or lfu: evict the lowest (count, last touch) not in the step.
    seed [K]: hotness's hotlist seeds; preload: keys admitted before the first step."""
    K = n_keys
    count = seed.copy() if count_selects else np.zeros(K, np.int64)
    last = np.zeros(K, np.int64)
    res = np.zeros(K, np.bool_)
    instep = np.full(K, -1, np.int64)
    cap = n_slots + 1
    h1 = np.empty(cap, np.int64)
    h2 = np.empty(cap, np.int64)
    hk = np.empty(cap, np.int64)
    kept = np.empty(cap, np.int64)
    hit = np.zeros(keys.shape[0], np.bool_)
    n = size = stamp = positions = 0
    for k in preload:
        last[k] = stamp
        res[k] = True
        n = _push(h1, h2, hk, n, count[k], stamp, k)
        stamp += 1
        size += 1
    for s in range(ptr.shape[0] - 1):
        a, b = ptr[s], ptr[s + 1]
        if new_seq[s] and count_selects:
            positions = 0
            count[:] = seed
            n = _rebuild(h1, h2, hk, count, last, res)
        m = 0
        for i in range(a, b):
            k = keys[i]
            instep[k] = s
            if count_selects:
                count[k] += counts[i]
            if res[k]:
                hit[i] = True
                if not count_selects:
                    count[k] += 1
                last[k] = stamp
                stamp += 1
            else:
                m += 1
        need = m - (n_slots - size)
        n_kept = 0
        while need > 0 and n > 0:
            k = hk[0]
            if last[k] != h2[0]:  # outdated: counts and touches only grew since; re-sort
                h1[0], h2[0] = count[k], last[k]
                _sift_down(h1, h2, hk, n, 0)
                continue
            n = _pop(h1, h2, hk, n)
            if instep[k] == s:
                kept[n_kept] = k
                n_kept += 1
                continue
            res[k] = False
            if not count_selects:
                count[k] = 0
            size -= 1
            need -= 1
        for j in range(n_kept):
            k = kept[j]
            n = _push(h1, h2, hk, n, count[k], last[k], k)
        for i in range(a, b):
            if not hit[i]:
                k = keys[i]
                if not count_selects:
                    count[k] = 0
                last[k] = stamp
                res[k] = True
                n = _push(h1, h2, hk, n, count[k], stamp, k)
                stamp += 1
                size += 1
        if tick[s] and decay_every:
            before = positions // decay_every
            positions += tick[s]
            shift = min(positions // decay_every - before, 63)
            if shift:
                for k in range(K):
                    count[k] >>= shift
                n = _rebuild(h1, h2, hk, count, last, res)
    return hit


# -- offline: Belady's MIN and the optimum with bypass ----------------------------------------


@njit(cache=True)
def next_use(keys, ptr, n_keys):
    """[N]: the step index where each access's key is selected next (NEVER if never)."""
    seen = np.full(n_keys, NEVER, np.int64)
    out = np.empty(keys.shape[0], np.int64)
    for s in range(ptr.shape[0] - 2, -1, -1):
        for i in range(ptr[s], ptr[s + 1]):
            out[i] = seen[keys[i]]
        for i in range(ptr[s], ptr[s + 1]):
            seen[keys[i]] = s
    return out


@njit(cache=True)
def belady_hits(keys, ptr, n_slots, n_keys):
    """Belady's MIN under the step semantics, ties as specdec.sim.bounds.Belady breaks them."""
    nu = next_use(keys, ptr, n_keys)
    res_next = np.full(n_keys, -1, np.int64)  # next use of a resident key; -1: not resident
    instep = np.full(n_keys, -1, np.int64)
    cap = keys.shape[0] + 1
    h1 = np.empty(cap, np.int64)  # -next use: a min-heap pops the farthest first
    h2 = np.empty(cap, np.int64)  # key: among equal next uses, the smallest key first
    hk = np.empty(cap, np.int64)
    kept = np.empty(n_slots + 1, np.int64)
    hit = np.zeros(keys.shape[0], np.bool_)
    n = size = 0
    for s in range(ptr.shape[0] - 1):
        a, b = ptr[s], ptr[s + 1]
        m = 0
        for i in range(a, b):
            k = keys[i]
            instep[k] = s
            if res_next[k] >= 0:
                hit[i] = True
                res_next[k] = nu[i]
                n = _push(h1, h2, hk, n, -nu[i], k, k)
            else:
                m += 1
        need = m - (n_slots - size)
        n_kept = 0
        while need > 0 and n > 0:
            k, v = hk[0], -h1[0]
            n = _pop(h1, h2, hk, n)
            if res_next[k] != v:
                continue  # stale
            if instep[k] == s:
                kept[n_kept] = k
                n_kept += 1
                continue
            res_next[k] = -1
            size -= 1
            need -= 1
        for j in range(n_kept):
            k = kept[j]
            n = _push(h1, h2, hk, n, -res_next[k], k, k)
        for i in range(a, b):
            if not hit[i]:
                k = keys[i]
                res_next[k] = nu[i]
                n = _push(h1, h2, hk, n, -nu[i], k, k)
                size += 1
    return hit


@njit(cache=True)
def bypass_opt_hits(keys, ptr, n_slots, n_keys, init):
    """Fewest misses of any cache of n_slots when a miss may be read into scratch (outside the
    slots) and not kept: after each step keep the n_slots keys of (cache | step) used again
    soonest. init: keys resident before the first step (a free warm start). hit [N]."""
    nu = next_use(keys, ptr, n_keys)
    res_next = np.full(n_keys, -1, np.int64)
    cap = keys.shape[0] + init.shape[0] + 1
    h1 = np.empty(cap, np.int64)
    h2 = np.empty(cap, np.int64)
    hk = np.empty(cap, np.int64)
    hit = np.zeros(keys.shape[0], np.bool_)
    first = np.full(n_keys, NEVER, np.int64)  # step of each key's first use
    n = size = 0
    for s in range(ptr.shape[0] - 2, -1, -1):
        for i in range(ptr[s], ptr[s + 1]):
            first[keys[i]] = s
    for k in init:
        res_next[k] = first[k]
        n = _push(h1, h2, hk, n, -first[k], k, k)
        size += 1
    for s in range(ptr.shape[0] - 1):
        a, b = ptr[s], ptr[s + 1]
        for i in range(a, b):
            k = keys[i]
            if res_next[k] >= 0:
                hit[i] = True
            else:
                size += 1
            res_next[k] = nu[i]
            n = _push(h1, h2, hk, n, -nu[i], k, k)
        while size > n_slots:
            k, v = hk[0], -h1[0]
            n = _pop(h1, h2, hk, n)
            if res_next[k] == v:
                res_next[k] = -1
                size -= 1
    return hit
