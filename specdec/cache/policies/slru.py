"""`slru`: segmented LRU, probation and protected segments."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from specdec.cache.policies.base import Policy, _pop_oldest, register


@dataclass(frozen=True)
class SLRUOptions:
    protected: float | int = 0.8  # the protected segment: a share of the slots, or a count


@register
class SLRU(Policy):
    """Segmented LRU: misses enter probation; a hit there promotes into protected.

    Protected holds at most `protected` keys (default 80% of the slots); its overflow is demoted
    to probation's most-recent end. Victims come from probation's oldest end first, so keys seen
    once (scans, wasted prefetches) go before any key that was hit again.
    """

    name = "slru"
    Options = SLRUOptions
    listed = 1

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
