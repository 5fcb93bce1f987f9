"""A least-recently-used cache that only counts: what an ExpertCache of policy `lru` holds and
misses, access for access, without slots.

    cache = counting(spec.cache(n_slots))     # a CountingLRU where that is a plain LRU, else it
    missed = cache.access([3, 7, 9])          # the keys not held, now held (oldest evicted)
    cache.held_order()                        # its keys, first evicted first

`--gamma auto`'s shadows (specdec.gamma.shadows) replay every committed token once for plain
decoding and once more for each candidate γ: a pass of bookkeeping for every pass the run makes,
on the host, outside the device model. An ExpertCache spends most of an access on what a shadow
never asks (slots, scratch, prefetch and demotion), so a shadow of a plain LRU (no speculation
options, no scratch: the only cache `--gamma auto` re-syncs to) runs on this instead. It keeps
ExpertCache's order exactly: a step's hits move to the recent end in the step's order, the
oldest keys leave for its misses, the misses enter in the step's order. Tests:
`pytest tests/cache/test_counting_lru.py`.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import filterfalse, repeat

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies.base import _consume
from specdec.cache.policies.lru import LRU
from specdec.core.errors import BudgetError


class CountingLRU:
    """An LRU of `n_slots` keys that counts its misses (module doc)."""

    def __init__(self, n_slots: int):
        self.n_slots = self.max_step = n_slots
        self.order: OrderedDict[int, None] = OrderedDict()  # oldest first

    def access(self, ks: list[int], counts: list[int] | None = None) -> list[int]:
        """One step over distinct keys `ks`: the keys it missed (now held). `counts` is ignored
        (LRU orders by recency only); kept so a step reads as ExpertCache.access reads."""
        if len(ks) > self.max_step:
            raise BudgetError(
                f"a step selects {len(ks)} distinct experts but the cache has {self.n_slots} "
                "slots: raise the budget or split the step"
            )
        order = self.order
        missed = list(filterfalse(order.__contains__, ks))
        _consume(map(order.move_to_end, filter(order.__contains__, ks) if missed else ks))
        if missed:
            pop = order.popitem
            for _ in range(len(order) + len(missed) - self.n_slots):
                pop(False)
            order.update(zip(missed, repeat(None)))
        return missed

    def tick(self, n_positions: int) -> None:
        pass

    def new_sequence(self) -> None:
        pass

    def preload(self, keys: list[int] | None = None) -> None:
        """Hold `keys` (a plain LRU preloads none of its own) while slots are free."""
        fresh = [k for k in keys or () if k not in self.order]
        self.order.update(zip(fresh[: self.n_slots - len(self.order)], repeat(None)))

    def held_order(self) -> list[int]:
        return list(self.order)

    def resident_keys(self) -> list[int]:
        return sorted(self.order)


def counting(cache: ExpertCache) -> ExpertCache | CountingLRU:
    """`cache` as a shadow replays it: a CountingLRU of its size where it is an empty plain LRU
    (no speculation options, no scratch), else `cache` itself."""
    plain = type(cache.policy) is LRU and not cache.spec and not cache.n_scratch
    return CountingLRU(cache.n_slots) if plain and not cache.held_order() else cache
