"""`hotness` (ds4's route hotness) and `lfu`: evict the lowest count, on one lazy heap."""

from __future__ import annotations

import heapq
from collections import (
    # Counter.update's C helper: +1 per element on a plain dict, ~3x a dict comprehension;
    # private to collections but there since Python 3.2. hotness and lfu count with it.
    _count_elements,  # type: ignore[attr-defined]
)
from collections.abc import Sequence
from dataclasses import dataclass

from specdec.cache.policies.base import Policy, register


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


@dataclass(frozen=True)
class HotnessOptions:
    decay_every: int = 16  # positions between halvings of every counter
    hotlist: Sequence[int] = ()  # keys, hottest first: seed the counters, preloaded to the budget
    preload: bool = True

    def __post_init__(self):
        object.__setattr__(self, "hotlist", tuple(self.hotlist or ()))  # None: no hotlist


@register
class Hotness(CountPolicy):
    name = "hotness"
    Options = HotnessOptions
    listed = 2

    @classmethod
    def build(cls, n_slots: int, options: HotnessOptions) -> Hotness:
        return cls(
            n_slots,
            name="hotness",
            count_selects=True,
            decay_every=options.decay_every,
            hotlist=options.hotlist or (),
            preload=options.preload,
        )


@register
class LFU(CountPolicy):
    name = "lfu"
    listed = 3

    @classmethod
    def build(cls, n_slots: int, options) -> LFU:
        return cls(n_slots, name="lfu", count_selects=False)
