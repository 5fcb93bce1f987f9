"""A least-recently-used cache that only counts: what an ExpertCache of policy `lru` holds and
misses, access for access, without slots.

    cache = counting(spec.cache(n_slots))     # a CountingLRU where that is a plain LRU, else it
    missed = cache.access([3, 7, 9])          # the keys not held, now held (oldest evicted)
    cache.held_order()                        # its keys, first evicted first

`--gamma auto`'s shadows (specdec.gamma.shadows) replay every committed token once for plain
decoding and once more for each candidate γ: a pass of bookkeeping for every pass the run makes,
on the host, outside the device model. An ExpertCache spends most of an access on what a shadow
never asks (slots, scratch, prefetch and demotion), so a shadow of a plain LRU (no speculation
options, no scratch: the only cache `--gamma auto` re-syncs to) runs on this instead: the same
policy object and hooks (specdec/cache/policies/lru.py: hits, victims, admissions, in
ExpertCache's order), so the same misses and order, without slots. Where a forward steps many
layers, `counting` gives a BatchedLRU instead (specdec.cache.batched_lru: the same again, a
forward's layers stepped at once over arrays). Tests: `pytest tests/cache/test_counting_lru.py`.
"""

from __future__ import annotations

from itertools import filterfalse

from specdec.cache.batched_lru import BatchedLRU
from specdec.cache.expert_cache import ExpertCache, too_wide
from specdec.cache.policies.lru import LRU
from specdec.core.errors import BudgetError


class CountingLRU:
    """ExpertCache's step on an LRU policy without slots: the keys held are the policy's order,
    and a step calls the policy's hooks as ExpertCache.access calls them (module doc)."""

    def __init__(self, policy: LRU):
        self.policy = policy
        self.n_slots = self.max_step = policy.n_slots

    def access(self, ks: list[int], counts: list[int] | None = None) -> list[int]:
        """One step over distinct keys `ks`: the keys it missed (now held). `counts` is ignored
        (LRU orders by recency only); kept so a step reads as ExpertCache.access reads."""
        if len(ks) > self.max_step:
            raise BudgetError(too_wide(len(ks), self.max_step, self.n_slots))
        held = self.policy.order
        missed = list(filterfalse(held.__contains__, ks))
        self.policy.hit(filter(held.__contains__, ks) if missed else ks)
        if missed:
            over = len(held) + len(missed) - self.n_slots
            if over > 0:  # the step's hits are the newest now: the oldest are none of its keys
                self.policy.victims(over, ks, in_step=True)
            self.policy.admit(missed)
        return missed

    def tick(self, n_positions: int) -> None:
        pass

    def new_sequence(self) -> None:
        pass

    def preload(self, keys: list[int] | None = None) -> None:
        """Hold `keys` (a plain LRU preloads none of its own) while slots are free."""
        fresh = [k for k in keys or () if k not in self.policy.order]
        self.policy.admit(fresh[: self.n_slots - len(self.policy.order)])

    def held_order(self) -> list[int]:
        return self.policy.held_order()

    def resident_keys(self) -> list[int]:
        return sorted(self.policy.order)


# a forward's MoE layers from which a shadow steps them at once (specdec.cache.batched_lru):
# measured on auto's shadows, MiniMax's 62 layers 2.5x faster so, the CUDA sessions' 16-layer
# pack 1.2x, the bundled model's 4 2.3x slower
BATCH_LAYERS = 16


def counting(cache: ExpertCache, layers: int = 1) -> ExpertCache | CountingLRU | BatchedLRU:
    """`cache` as a shadow replays it: where it is an empty plain LRU (no speculation options,
    no scratch), one that only counts on its policy (a BatchedLRU where a forward steps
    `layers` >= BATCH_LAYERS, else a CountingLRU), else `cache` itself."""
    plain = type(cache.policy) is LRU and not cache.spec and not cache.n_scratch
    if not plain or cache.held_order():
        return cache
    return BatchedLRU(cache.policy) if layers >= BATCH_LAYERS else CountingLRU(cache.policy)
