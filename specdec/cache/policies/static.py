"""`static`: pin a hotlist; everything else goes through scratch slots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdec.cache.policies.base import Policy, register


@dataclass(frozen=True)
class StaticOptions:
    hotlist: Sequence[int] = ()  # keys, hottest first (specdec.trace.format hotlists)
    scratch: int = 64  # slots for one step's misses (top-8 x 8 positions)
    preload: bool = True  # read the pinned keys before the first step

    def __post_init__(self):
        object.__setattr__(self, "hotlist", tuple(self.hotlist or ()))  # None: no hotlist


@register
class Static(Policy):
    """Pin a hotlist; everything else is read into a scratch slot and dropped after the step.

    The cache is split into `scratch` slots for the misses of one step and n_slots - scratch
    slots for the first keys of the hotlist (pinned, preloaded or read on first use and kept).
    A step fits whenever it selects at most `scratch` keys, so `max_step()` is `scratch`; the
    default (64 = top-8 x 8 positions) suits the runtime, the simulator passes its step width.
    """

    name = "static"
    Options = StaticOptions
    listed = 4
    needs_hotlist = True
    prefetchable = False
    demotable = False

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
