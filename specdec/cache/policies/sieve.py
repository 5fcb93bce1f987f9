"""`sieve`: SIEVE (Zhang et al., NSDI'24), a FIFO queue with a visited bit and a moving hand.

Scan-resistant and lazy: a hit only sets the key's visited bit (no reordering); the hand walks
from the oldest key towards the newest, clearing visited bits, and evicts the first key it
finds unvisited, then rests there; past the newest it wraps to the oldest. New keys enter at
the newest end unvisited, so a key read once and never again (a rejected draft's expert, a
scan) is evicted at the hand's next pass unless it is used again first.

On steps of one key this is libCacheSim's Sieve access for access (tests/cache/test_spec_cache.py).
On wider steps the hand passes over keys of the running step (clearing their bit like any
other) but never evicts one; after two full turns without a victim it gives up.
"""

from __future__ import annotations

from specdec.cache.policies.base import Policy, register

_END = -1  # the sentinel of the circular list: newer[_END] = oldest key, older[_END] = newest


@register
class Sieve(Policy):
    """SIEVE: a visited bit per key and a hand moving from old to new."""

    name = "sieve"
    listed = 5

    def __init__(self, n_slots: int):
        super().__init__(n_slots)
        self.newer: dict[int, int] = {_END: _END}  # key -> the key inserted after it
        self.older: dict[int, int] = {_END: _END}  # key -> the key inserted before it
        self.visited: dict[int, bool] = {}
        self.hand = _END  # _END: start from the oldest key

    def hit(self, keys):
        self.visited.update(dict.fromkeys(keys, True))

    def admit(self, keys):
        newer, older, visited = self.newer, self.older, self.visited
        for k in keys:  # each becomes the newest: between the newest key and _END
            last = older[_END]
            newer[last], older[k] = k, last
            newer[k], older[_END] = _END, k
            visited[k] = False
        return ()

    def _unlink(self, k: int) -> None:
        n, o = self.newer.pop(k), self.older.pop(k)
        self.newer[o], self.older[n] = n, o
        del self.visited[k]
        if self.hand == k:
            self.hand = n

    def remove(self, keys):
        for k in keys:
            if k in self.visited:
                self._unlink(k)

    def victims(self, n, exclude, in_step=False):
        out: list[int] = []
        newer, visited = self.newer, self.visited
        budget = 2 * len(visited) + 1  # two turns clear every bit: a victim exists by then
        k = self.hand
        while len(out) < n and budget > 0:
            if k == _END:
                k = newer[_END]  # wrap to the oldest key
                if k == _END:
                    break  # empty
            budget -= 1
            if visited[k]:
                visited[k] = False
                k = newer[k]
            elif k in exclude:
                k = newer[k]
            else:
                nxt = newer[k]
                self._unlink(k)
                out.append(k)
                k = nxt
                budget = 2 * len(visited) + 1
        self.hand = k
        return out
