"""A least-recently-used cache that only counts, stepping a whole forward's layers at once: what
a CountingLRU (and an ExpertCache of policy `lru`) holds and misses, step for step, in a few
array operations per forward instead of a dict operation per key.

    cache = BatchedLRU(policy)                 # an LRU policy's size (counting_lru.counting)
    missed = cache.steps(keys, step, n_steps)  # keys [N] of steps `step` [N]: [N] bool missed
    cache.access([3, 7, 9])                    # one step, as CountingLRU.access
    cache.held_order()                         # its keys, first evicted first

`--gamma auto`'s shadows (specdec.gamma.shadows) step every committed token's MoE layers once for
plain decoding and again for each candidate γ: on the MiniMax trace (62 layers) a CountingLRU's
dict operations per key are most of auto's host time. Here the state is an array of the keys
held, oldest first, and each key's place in it; a forward's steps (one per layer, no key in two
of them) are taken together, exactly as one after another:

- a step moves its held keys to the newest end, in its order, then evicts the oldest keys the
  step does not select, then appends its new keys; so every eviction takes the oldest key no
  step up to it has selected (a key selected later is evictable until its step);
- counting only the keys not held when the batch starts (M0_j new keys in steps 0..j), the
  batch has evicted G_j = max(0, h + M0_j − n) of the keys no step up to j selects by the end of
  step j (h held, n slots): a selected key evicted before its step misses there, adding one
  miss and one eviction, so the others evicted are G_j all the same;
- so a held key selected at step t misses iff fewer than G_{t−1} keys precede it among the order's
  keys not selected by steps before t (its rank there: its place, less the held keys before it
  that earlier steps select), found for the few keys close enough to the oldest end;
- after the batch: the order's keys no step selects less their G oldest, then each step's held
  keys and misses, in its order.

Where the evictions would reach keys the batch itself placed (a cache smaller than a forward's
keys), the batch stops at the step before and the next batch starts there; one step alone always
fits. Tests: `pytest tests/cache/test_counting_lru.py`.
"""

from __future__ import annotations

import numpy as np

from specdec.cache.expert_cache import too_wide
from specdec.cache.policies.lru import LRU
from specdec.core.errors import BudgetError


class BatchedLRU:
    """An LRU over arrays whose `steps` take a forward's steps at once (module doc)."""

    def __init__(self, policy: LRU):
        self.policy = policy  # the LRU it counts for: its size (its own order stays unused)
        self.n_slots = self.max_step = policy.n_slots
        self._order = np.empty(0, np.int64)  # [h] the keys held, first evicted first
        # [keys] each key's index in _order, -1: not held (cache keys are small: a layer's
        # stride, the most experts of a layer, times the layer, plus the expert)
        self._place = np.full(0, -1, np.int64)

    def steps(self, keys: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
        """[N] whether each of `keys` [N] missed, the keys of `n_steps` steps one after another
        (`step` [N]: each key's, ascending; each step's keys distinct, at most the cache's size,
        and in its order; no key in two steps: a forward's layers)."""
        missed = np.empty(len(keys), bool)
        if len(keys) and keys.max() >= len(self._place):
            grown = np.full(max(int(keys.max()) + 1, 2 * len(self._place)), -1, np.int64)
            grown[: len(self._place)] = self._place
            self._place = grown
        done = at = 0
        while done < n_steps:  # mostly one batch: more only where a forward outgrows the cache
            done += self._batch(keys[at:], step[at:] - done, n_steps - done, missed[at:])
            at = int(step.searchsorted(done))
        return missed

    def _batch(self, keys: np.ndarray, step: np.ndarray, n_steps: int, out: np.ndarray) -> int:
        """Steps 0..n_steps−1 of `keys` [N] (`step` [N]) at once, as far as the evictions stay
        among keys held before them; their misses into `out`. Returns the steps taken. (Array
        methods, not numpy's functions: their wrappers cost more than the work at these sizes.)"""
        order, place = self._order, self._place
        where = place[keys]  # [N] each key's index in the order, -1: new
        missed = where < 0  # [N]
        held = (~missed).nonzero()[0]  # [H] keys held at the start, by index in `keys`
        at, on = where[held], step[held]  # [H] their places, their steps
        per = np.bincount(on, minlength=n_steps)  # [S] held keys per step
        upto = per.cumsum()  # [S] held keys of steps 0..j
        gone = len(order) + np.bincount(step[missed], minlength=n_steps).cumsum() - self.n_slots
        np.maximum(gone, 0, out=gone)  # [S] G_j
        unselected = np.ones(len(order), bool)  # [h]
        unselected[at] = False
        rest = unselected.nonzero()[0]  # [h − H] places of the keys no step selects
        # the evictable keys by the end of step j: those no step selects and the held keys of
        # later steps; where G_j exceeds them, step j evicts keys the batch placed
        short = gone > len(rest) + len(held) - upto  # [S]
        if short.any():
            if n_steps == 1:
                raise BudgetError(too_wide(len(keys), self.max_step, self.n_slots))
            stop = max(int(short.argmax()), 1)
            end = int(step.searchsorted(stop))
            return self._batch(keys[:end], step[:end], stop, out)
        before = np.zeros_like(gone)  # [S] G_{j−1} (none before the first step)
        before[1:] = gone[:-1]
        # a held key's rank is at least its place less the held keys of earlier steps: only one
        # placed below G_{t−1} plus those can have been evicted (mostly none, or a few)
        near = (at < (before + upto - per)[on]).nonzero()[0]
        if len(near):
            p, s = at[near], on[near]  # [C]
            below = at < p.max()  # [H] held keys that can precede one of them
            ahead = (at[below][None, :] < p[:, None]) & (on[below][None, :] < s[:, None])  # [C, .]
            missed[held[near[p - ahead.sum(1) < before[s]]]] = True
        evicted = int(gone[-1])
        place[order[rest[:evicted]]] = -1
        tail = keys[(2 * step + missed).argsort(kind="stable")]  # each step's hits, then misses
        self._order = order = np.concatenate((order[rest[evicted:]], tail))
        place[order] = np.arange(len(order))
        out[: len(keys)] = missed
        return n_steps

    def access(self, ks: list[int], counts: list[int] | None = None) -> list[int]:
        """One step over distinct keys `ks`, as CountingLRU.access: the keys it missed (now
        held); `counts` ignored (LRU orders by recency only). A step wider than the cache is
        refused as `steps` refuses one (BudgetError)."""
        keys = np.asarray(ks, np.int64)
        return keys[self.steps(keys, np.zeros(len(keys), np.int64), 1)].tolist()

    def tick(self, n_positions: int) -> None:
        pass

    def new_sequence(self) -> None:
        pass

    def preload(self, keys: list[int] | None = None) -> None:
        """Hold `keys` while slots are free, in order (as CountingLRU.preload)."""
        held = set(self._order.tolist())
        fresh = [k for k in keys or () if k not in held][: self.n_slots - len(self._order)]
        fresh = list(dict.fromkeys(fresh))  # a key twice is admitted once, where it came first
        if fresh:
            self.steps(np.array(fresh, np.int64), np.zeros(len(fresh), np.int64), 1)

    def held_order(self) -> list[int]:
        return self._order.tolist()

    def resident_keys(self) -> list[int]:
        return sorted(self._order.tolist())
