"""`s3fifo`: S3-FIFO (Yang et al., SOSP'23), a small FIFO, a main FIFO and a ghost FIFO.

New keys enter the small queue (10% of the slots); one hit there (two, libCacheSim's
`move-to-main-threshold=2`) earns a place in the main queue when the key reaches the small
queue's old end, else it is evicted and its id remembered in the ghost queue (90% of the slots,
ids only). A miss on a ghost id enters the main queue directly. The main queue is a CLOCK with
a 2-bit counter: its oldest key goes back to the new end with counter min(c, 3) - 1 while c > 0.
Keys touched once (a scan; a rejected draft's experts) leave from the small queue without
disturbing the main one: the scan resistance the union of a verify pass calls for.

It follows libCacheSim's S3FIFO.c (libcachesim 0.3.5): before the first eviction a key that
finds the small queue full enters the main queue. On steps of one key it is libCacheSim's
S3FIFO access for access at 20 slots and more (tests/cache/test_spec_cache.py); below 20 slots
libCacheSim's small queue (int(0.1 n) slots) cannot hold a key and admits nothing, here it
keeps at least one. On wider steps a key of the running step that reaches an old end goes back
to its queue's new end instead of leaving (as if touched): the small queue turns at most
once per eviction, the main queue at most four times (its counters are at most 3).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from specdec.cache.policies.base import Policy, register


@dataclass(frozen=True)
class S3FIFOOptions:
    small: float = 0.10  # the small queue's share of the slots
    ghost: float = 0.90  # ghost ids kept, as a share of the slots
    threshold: int = 2  # hits in the small queue that move a key to the main queue


@register
class S3FIFO(Policy):
    """Small FIFO + main FIFO (2-bit CLOCK) + ghost FIFO of evicted ids."""

    name = "s3fifo"
    Options = S3FIFOOptions
    listed = 6
    uses_select = True  # a ghost id is looked up before this step's evictions refill the ghost

    def __init__(
        self,
        n_slots: int,
        small: float = S3FIFOOptions.small,
        ghost: float = S3FIFOOptions.ghost,
        threshold: int = S3FIFOOptions.threshold,
    ):
        super().__init__(n_slots)
        self.small_cap = max(1, int(n_slots * small))
        self.main_cap = n_slots - self.small_cap
        self.ghost_cap = int(n_slots * ghost)
        self.threshold = threshold
        self.small: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.main: OrderedDict[int, None] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.freq: dict[int, int] = {}  # resident key -> hits since it entered its queue
        self.to_main: set[int] = set()  # this step's misses that were ghost ids
        self.has_evicted = False

    def select(self, keys, counts):
        freq, ghost = self.freq, self.ghost
        for k in keys:
            if k not in freq and k in ghost:
                del ghost[k]
                self.to_main.add(k)

    def hit(self, keys):
        freq = self.freq
        for k in keys:
            freq[k] += 1

    def admit(self, keys):
        for k in keys:
            if k in self.to_main:
                self.main[k] = None
            elif not self.has_evicted and len(self.small) >= self.small_cap:
                self.main[k] = None
            else:
                self.small[k] = None
            self.freq[k] = 0
        self.to_main.clear()
        return ()

    def remove(self, keys):
        for k in keys:
            if self.freq.pop(k, None) is not None:
                self.small.pop(k, None)
                self.main.pop(k, None)

    def victims(self, n, exclude, in_step=False):
        self.has_evicted = True
        out: list[int] = []
        while len(out) < n:
            from_main = len(self.main) > self.main_cap or not self.small
            k = self._evict_main(exclude) if from_main else self._evict_small(exclude)
            if k is None and not from_main:
                k = self._evict_main(exclude)
            if k is None:
                break  # every resident key is in `exclude`
            out.append(k)
        return out

    def _evict_small(self, exclude) -> int | None:
        small, freq = self.small, self.freq
        for _ in range(len(small)):
            k, _ = small.popitem(last=False)
            if k in exclude:
                small[k] = None
            elif freq[k] >= self.threshold:
                self.main[k] = None
                freq[k] = 0
            else:
                del freq[k]
                if self.ghost_cap:
                    self.ghost[k] = None
                    if len(self.ghost) > self.ghost_cap:
                        self.ghost.popitem(last=False)
                return k
        return None

    def _evict_main(self, exclude) -> int | None:
        main, freq = self.main, self.freq
        for _ in range(4 * len(main)):  # counters <= 3: four turns reach a zero, bar `exclude`
            if not main:
                return None
            k, _ = main.popitem(last=False)
            c = freq[k]
            if c >= 1:
                main[k] = None
                freq[k] = min(c, 3) - 1
            elif k in exclude:
                main[k] = None
            else:
                del freq[k]
                return k
        return None
