"""Eviction policies of the expert cache, shared by the runtime and the trace simulator.

    from specdec.cache.policies import make_policy
    policy = make_policy("slru", n_slots=96)      # names: see POLICIES

A policy only orders keys; `ExpertCache` owns the slots and drives the policy once per step, in
batches (one call per step, not per access) because the simulator replays millions of accesses:

    select(keys, counts)   every key of the step, before anything else (only if uses_select)
    hit(keys)              the step's resident keys, ascending
    victims(n, exclude, in_step)
                           remove and return up to n resident keys not in `exclude`, best
                           first; in_step: `exclude` is the current step, whose resident keys
                           hit() has just touched (LRU relies on it to skip the checks)
    admit(keys)            the step's misses, ascending, now resident; returns the keys the
                           policy does not keep (static's scratch reads), freed before next step
    remove(keys)           resident keys the cache drops outside eviction (their read failed)
    tick(n_positions)      once per forward call, after its steps
    new_sequence()         a prefill from position 0 begins (hotness resets its counters)

Victims are chosen before the misses are admitted. That equals admitting misses one at a time
and evicting one victim before each: a just-admitted miss belongs to the step and may never be a
victim, and no policy changes its order of the non-step keys while admitting.
"""

from __future__ import annotations

import heapq
from collections import (
    OrderedDict,
    # Counter.update's C helper: +1 per element on a plain dict, ~3x a dict comprehension;
    # private to collections but there since Python 3.2. hotness and lfu count with it.
    _count_elements,  # type: ignore[attr-defined]
    deque,
)
from collections.abc import Collection, Sequence
from itertools import repeat

from specdec.errors import BudgetError, SpecdecError


class Policy:
    """Base of every policy: the hooks `ExpertCache` calls; see the module docstring."""

    name = "base"
    uses_select = False  # the cache skips select() unless set: one call fewer per step
    prefetchable = True  # static is not: it keeps only pinned keys, whatever is read ahead

    def __init__(self, n_slots: int):
        if n_slots < 1:
            raise BudgetError(f"a cache needs at least 1 slot, got {n_slots}: raise the budget")
        self.n_slots = n_slots

    def max_step(self) -> int:
        """The most distinct keys one step may select."""
        return self.n_slots

    def select(self, keys: list[int], counts: list[int] | None) -> None:
        pass

    def hit(self, keys: list[int]) -> None:
        raise NotImplementedError

    def admit(self, keys: list[int]) -> Sequence[int]:
        raise NotImplementedError

    def victims(self, n: int, exclude: Collection[int], in_step: bool = False) -> list[int]:
        raise NotImplementedError

    def remove(self, keys: list[int]) -> None:
        raise NotImplementedError

    def tick(self, n_positions: int) -> None:
        pass

    def new_sequence(self) -> None:
        pass

    def preload_keys(self) -> list[int]:
        """Keys to read before the first step, in order (hotlist seeding); [] by default."""
        return []


_consume = deque(maxlen=0).extend  # runs an iterator to its end in C: a loop without bytecode


def _pop_oldest(order: OrderedDict, n: int, exclude: Collection[int], out: list[int]) -> None:
    """Move up to n keys not in `exclude` from the old end of `order` into `out`."""
    if n <= 0:
        return
    taken = []
    for k in order:
        if k not in exclude:
            taken.append(k)
            if len(taken) == n:
                break
    for k in taken:
        del order[k]
    out.extend(taken)


class LRU(Policy):
    """Least recently used: one ordered dict, oldest first."""

    name = "lru"

    def __init__(self, n_slots: int):
        super().__init__(n_slots)
        self.order: OrderedDict[int, None] = OrderedDict()

    def hit(self, keys):
        _consume(map(self.order.move_to_end, keys))

    def admit(self, keys):
        self.order.update(zip(keys, repeat(None)))
        return ()

    def remove(self, keys):
        for k in keys:
            self.order.pop(k, None)

    def victims(self, n, exclude, in_step=False):
        if in_step:  # the step's resident keys were just touched: the n oldest are not in it
            pop = self.order.popitem
            return [pop(False)[0] for _ in range(n)]
        out: list[int] = []
        _pop_oldest(self.order, n, exclude, out)
        return out


class SLRU(Policy):
    """Segmented LRU: misses enter probation; a hit there promotes into protected.

    Protected holds at most `protected` keys (default 80% of the slots); its overflow is demoted
    to probation's most-recent end. Victims come from probation's oldest end first, so keys seen
    once (scans, wasted prefetches) go before any key that was hit again.
    """

    name = "slru"

    def __init__(self, n_slots: int, protected: float | int = 0.8):
        super().__init__(n_slots)
        cap = protected if isinstance(protected, int) else round(protected * n_slots)
        self.protected_cap = max(0, min(n_slots, cap))
        self.probation: OrderedDict[int, None] = OrderedDict()
        self.protected: OrderedDict[int, None] = OrderedDict()

    def hit(self, keys):
        prob, prot = self.probation, self.protected
        for k in keys:
            if k in prot:
                prot.move_to_end(k)
                continue
            del prob[k]
            prot[k] = None
            if len(prot) > self.protected_cap:
                prob[prot.popitem(last=False)[0]] = None

    def admit(self, keys):
        self.probation.update(dict.fromkeys(keys))
        return ()

    def remove(self, keys):
        for k in keys:
            self.probation.pop(k, None)
            self.protected.pop(k, None)

    def victims(self, n, exclude, in_step=False):
        out: list[int] = []
        _pop_oldest(self.probation, n, exclude, out)
        _pop_oldest(self.protected, n - len(out), exclude, out)
        return out


class CountPolicy(Policy):
    """Evict the lowest count; the least recently used breaks ties (`hotness` and `lfu`).

    hotness (ds4's route hotness): a counter per key that outlives eviction, +1 per selecting
    position on every selection (hit or miss), all counters halved (integer, like ds4's
    `hotness >>= 1`) every `decay_every` positions; a hotlist seeds the counters by rank
    (first key = len(hotlist)) and is preloaded up to the budget.
    lfu: hits since admission, reset when evicted, never decayed.

    Victims come from a min-heap of (count, last_used, key), one entry per resident key, updated
    lazily: between halvings a key's (count, last_used) only grows, so an outdated entry sorts
    too early, never too late. A popped entry that is outdated goes back with its current value;
    the first up-to-date one is the true minimum. Hits therefore cost two dict writes, and a
    halving (which lowers counts) rebuilds the heap.
    """

    def __init__(
        self,
        n_slots: int,
        *,
        name: str,
        count_selects: bool,
        decay_every: int = 0,
        hotlist: Sequence[int] = (),
        preload: bool = True,
    ):
        super().__init__(n_slots)
        self.name = name
        self.uses_select = count_selects
        self.decay_every = decay_every
        self.count: dict[int, int] = {}
        self.last: dict[int, int] = {}  # resident key -> stamp of its latest touch
        self.heap: list[tuple[int, int, int]] = []  # (count, stamp, key) per resident key
        self.stamp = 0
        self.positions = 0
        self._seed = {k: len(hotlist) - rank for rank, k in enumerate(hotlist)}
        self.count.update(self._seed)
        self._preload = list(hotlist[:n_slots]) if preload else []

    def preload_keys(self):
        return list(self._preload)

    def select(self, keys, counts):
        if counts is None:
            _count_elements(self.count, keys)
        else:
            get = self.count.get
            self.count.update({k: get(k, 0) + c for k, c in zip(keys, counts, strict=True)})

    def hit(self, keys):
        if not self.uses_select:  # lfu: the count is hits
            _count_elements(self.count, keys)
        s = self.stamp
        self.last.update(zip(keys, range(s, s + len(keys)), strict=True))
        self.stamp = s + len(keys)

    def admit(self, keys):
        cnt, last, heap, push = self.count, self.last, self.heap, heapq.heappush
        if not self.uses_select:
            cnt.update(dict.fromkeys(keys, 0))
        s = self.stamp
        for k in keys:
            last[k] = s
            push(heap, (cnt.get(k, 0), s, k))
            s += 1
        self.stamp = s
        return ()

    def remove(self, keys):
        # rare (a failed read): rebuild the heap without them; hotness counters outlive residency
        gone = {k for k in keys if self.last.pop(k, None) is not None}
        if not self.uses_select:
            for k in gone:
                self.count.pop(k, None)
        self.heap = [e for e in self.heap if e[2] not in gone]
        heapq.heapify(self.heap)

    def victims(self, n, exclude, in_step=False):
        out: list[int] = []
        kept = []
        heap, last, cnt = self.heap, self.last, self.count
        while len(out) < n and heap:
            c, s, k = heap[0]
            now = last[k]
            if now != s:  # every count change between halvings comes with a touch
                heapq.heapreplace(heap, (cnt.get(k, 0), now, k))  # outdated: re-sort it
                continue
            heapq.heappop(heap)
            if k in exclude:
                kept.append((c, s, k))
                continue
            del last[k]
            if not self.uses_select:
                del cnt[k]
            out.append(k)
        for entry in kept:
            heapq.heappush(heap, entry)
        return out

    def tick(self, n_positions):
        if not self.decay_every:
            return
        before = self.positions // self.decay_every
        self.positions += n_positions
        shift = self.positions // self.decay_every - before
        if shift:
            # Keys whose counter reaches 0 are dropped: a missing key reads as 0.
            self._recount({k: v >> shift for k, v in self.count.items() if v >> shift})

    def new_sequence(self):
        """ds4 resets route hotness at a prefill from position 0; the hotlist seeds it again."""
        if self.uses_select:
            self.positions = 0
            self._recount(dict(self._seed))

    def _recount(self, count: dict[int, int]) -> None:
        """Counts went down (halving, reset): the lazy heap's order no longer holds; rebuild."""
        self.count = count
        self.heap = [(count.get(k, 0), s, k) for k, s in self.last.items()]
        heapq.heapify(self.heap)


class Static(Policy):
    """Pin a hotlist; everything else is read into a scratch slot and dropped after the step.

    The cache is split into `scratch` slots for the misses of one step and n_slots - scratch
    slots for the first keys of the hotlist (pinned, preloaded or read on first use and kept).
    A step fits whenever it selects at most `scratch` keys, so `max_step()` is `scratch`; the
    default (64 = top-8 x 8 positions) suits the runtime, the simulator passes its step width.
    """

    name = "static"
    prefetchable = False

    def __init__(
        self, n_slots: int, hotlist: Sequence[int] = (), scratch: int = 64, preload: bool = True
    ):
        super().__init__(n_slots)
        self.scratch = max(1, min(scratch, n_slots))
        self.pinned = frozenset(hotlist[: n_slots - self.scratch])
        self._preload = list(hotlist[: n_slots - self.scratch]) if preload else []

    def max_step(self):
        return self.scratch

    def preload_keys(self):
        return list(self._preload)

    def hit(self, keys):
        pass

    def admit(self, keys):
        pinned = self.pinned
        return [k for k in keys if k not in pinned]

    def victims(self, n, exclude, in_step=False):
        return []  # pinned keys are never evicted; scratch is freed by the cache

    def remove(self, keys):
        pass  # a forgotten pinned key is read again (and pinned again) on its next use


POLICIES = ("lru", "slru", "hotness", "lfu", "static")


def make_policy(name: str, n_slots: int, **opts) -> Policy:
    """Build a policy by name. Options: slru `protected`; hotness `hotlist`, `preload`,
    `decay_every` (16); static `hotlist`, `scratch`, `preload`. Unused options are ignored, so
    one option dict can drive every policy of a sweep."""
    if name == "lru":
        return LRU(n_slots)
    if name == "slru":
        return SLRU(n_slots, protected=opts.get("protected", 0.8))
    if name == "hotness":
        return CountPolicy(
            n_slots,
            name="hotness",
            count_selects=True,
            decay_every=opts.get("decay_every", 16),
            hotlist=opts.get("hotlist") or (),
            preload=opts.get("preload", True),
        )
    if name == "lfu":
        return CountPolicy(n_slots, name="lfu", count_selects=False)
    if name == "static":
        return Static(
            n_slots,
            hotlist=opts.get("hotlist") or (),
            scratch=opts.get("scratch", 64),
            preload=opts.get("preload", True),
        )
    raise SpecdecError(f"unknown cache policy {name!r}: use one of {', '.join(POLICIES)}")
