"""libCacheSim (PyPI `libcachesim`) as an independent peer and as extra eviction policies.

    specdec simulate TRACE --policy lcs:ARC,lcs:LIRS,lcs:S3FIFO,lcs:Sieve,lcs:WTinyLFU
    from specdec.sim.lcs import lcs_hits, write_oracle_trace

A step of k keys becomes k requests, its keys in ascending order (object id = key + 1, size 1,
cache size = the slots, `next_access_vtime` = the request index of the key's next request, which
libCacheSim's Belady reads). Where the semantics differ from ExpertCache's steps: a request-level
cache may evict a key of the current step before that key's own request comes (a miss the step
semantics would count as a hit), and it admits each miss before looking at the next key, so the
order of hits and misses within a step is the key order, not hits first. On k = 1 steps the two
agree (tests/sim/test_lcs.py checks LRU and Belady exactly); on top-8 steps the difference is
measured there and in benchmarks/bench_policies.py.

Per-access hits come from one `get()` per request in Python (~1 M requests/s), which gives
exact bytes with mixed expert sizes; the benchmark times libCacheSim in its best configuration
instead (`process_trace` over a binary oracleGeneral file, all in C). `lcs_policy` is the one
place mapping names to libCacheSim classes.
"""

from __future__ import annotations

import numpy as np

from specdec.core.errors import SpecdecError

ORACLE = np.dtype([("time", "<u4"), ("obj", "<u8"), ("size", "<u4"), ("next", "<i8")])
INT64_MAX = np.iinfo(np.int64).max


# libCacheSim's policies offered as lcs:NAME, with the fewest slots each runs sanely at (checked
# on small traces, libcachesim 0.3.5): S3FIFO aborts the process below 10 slots and never hits
# below 20 (its 10% small FIFO rounds to nothing); WTinyLFU's 1% window is empty below 100 and
# it never hits. Left out: LFUDA (hangs on a 4-slot cache), and the size-aware, learned and
# probabilistic ones (GDSF, Size, BeladySize, LRB, GLCache, ThreeLCache, LRUProb, FlashProb).
LCS_POLICIES = {
    **dict.fromkeys(["ARC", "Clock", "FIFO", "LFU", "LHD", "LIRS", "LRU", "LRUK"], 1),
    **dict.fromkeys(["LeCaR", "MQ", "Random", "SLRU", "Sieve", "TwoQ", "Belady"], 1),
    **dict.fromkeys(["ClockPro", "Cacheus", "Hyperbolic"], 8),
    "S3FIFO": 20,
    "WTinyLFU": 100,
}


def lcs_policy(name: str, n_slots: int | None = None):
    """The libCacheSim cache class called `name` (case-insensitive), or a one-line error; with
    n_slots, also an error below the policy's smallest sane cache."""
    canon = {n.lower(): n for n in LCS_POLICIES}.get(name.lower())
    if canon is None:
        raise SpecdecError(
            f"unknown libCacheSim policy lcs:{name}: use one of "
            + ", ".join(f"lcs:{n}" for n in sorted(LCS_POLICIES))
        )
    try:
        import libcachesim
    except ImportError:
        raise SpecdecError(
            "lcs: policies need the libcachesim package: pip install libcachesim"
        ) from None
    if n_slots is not None and n_slots < LCS_POLICIES[canon]:
        raise SpecdecError(
            f"lcs:{canon} needs at least {LCS_POLICIES[canon]} slots (libCacheSim's own sizing), "
            f"got {n_slots}: raise the budget or drop it"
        )
    return getattr(libcachesim, canon)


def request_next(keys: np.ndarray) -> np.ndarray:
    """[N]: index of each request's next request for the same key (INT64_MAX if none)."""
    n = len(keys)
    order = np.lexsort((np.arange(n), keys))  # by key, then time
    nxt = np.full(n, INT64_MAX, np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def _hashpower(n_keys: int) -> int:
    return max(12, int(np.ceil(np.log2(max(n_keys, 2)))) + 1)


def lcs_hits(name: str, acc, n_slots: int) -> np.ndarray:
    """hit [N] of libCacheSim's `name` over the steps of `acc` as one request per key."""
    import libcachesim as lcs

    cache = lcs_policy(name, n_slots)(n_slots, hashpower=_hashpower(acc.n_keys))
    keys = acc.keys
    nxt = request_next(keys).tolist()
    req = lcs.Request()
    req.obj_size = 1
    get = cache.get
    out = np.empty(len(keys), bool)
    for i, k in enumerate(keys.tolist()):
        req.clock_time = i
        req.obj_id = k + 1
        req.next_access_vtime = nxt[i]
        out[i] = get(req)
    return out


def write_oracle_trace(keys: np.ndarray, path) -> None:
    """The requests as libCacheSim's binary oracleGeneral trace (for `process_trace`)."""
    rec = np.zeros(len(keys), ORACLE)
    rec["time"] = np.arange(1, len(keys) + 1)
    rec["obj"] = keys + 1
    rec["size"] = 1
    rec["next"] = request_next(keys)
    rec.tofile(path)


def lcs_process(name: str, path, n_slots: int, n_keys: int) -> float:
    """libCacheSim's own loop (C) over an oracleGeneral file: the miss ratio."""
    import libcachesim as lcs

    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = lcs_policy(name, n_slots)(n_slots, hashpower=_hashpower(n_keys))
    return cache.process_trace(reader)[0]
