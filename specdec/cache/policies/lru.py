"""`lru`: least recently used, one ordered dict."""

from __future__ import annotations

from collections import OrderedDict
from itertools import repeat

from specdec.cache.policies.base import Policy, _consume, _pop_oldest, register


@register
class LRU(Policy):
    """Least recently used: one ordered dict, oldest first."""

    name = "lru"
    listed = 0

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

    def held_order(self):
        return list(self.order)

    def adopt(self, order):
        self.order = OrderedDict.fromkeys(order)

    def victims(self, n, exclude, in_step=False):
        if in_step:  # the step's resident keys were just touched: the n oldest are not in it
            pop = self.order.popitem
            return [pop(False)[0] for _ in range(n)]
        out: list[int] = []
        _pop_oldest(self.order, n, exclude, out)
        return out
