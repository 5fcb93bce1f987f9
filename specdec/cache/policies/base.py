"""The policy interface (see the package docstring), the registry, and `make_policy`."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import filterfalse, islice

from specdec.core.errors import BudgetError, SpecdecError
from specdec.core.registry import Registry


@dataclass(frozen=True)
class NoOptions:
    """Policies without settings."""


class Policy:
    """Base of every policy: the hooks `ExpertCache` calls; see the module docstring."""

    name = "base"
    Options: type = NoOptions
    listed = 100  # where messages list it (built-in policies first, in the README's order)
    needs_hotlist = False  # useless without one (static pins it): the edges ask for one
    uses_select = False  # the cache skips select() unless set: one call fewer per step
    prefetchable = True  # static is not: it keeps only pinned keys, whatever is read ahead
    demotable = True  # +demote takes keys out through remove(); static's pins may not leave

    def __init__(self, n_slots: int):
        if n_slots < 1:
            raise BudgetError(f"a cache needs at least 1 slot, got {n_slots}: raise the budget")
        self.n_slots = n_slots

    @classmethod
    def build(cls, n_slots: int, options) -> Policy:
        return cls(
            n_slots, **{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        )

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

    def held_order(self) -> list[int] | None:
        """The keys it holds, first evicted first, where that order is its whole state (LRU);
        None for a policy with more state (counts, queues, pins)."""
        return None

    def adopt(self, order: list[int]) -> None:
        """Hold exactly `order`'s keys as `held_order()` lists them (ExpertCache.adopt);
        only a policy whose `held_order()` is its state can."""
        raise SpecdecError(f"policy {self.name} cannot take another cache's state")


_consume = deque(maxlen=0).extend  # runs an iterator to its end in C: a loop without bytecode


def _pop_oldest(order: OrderedDict, n: int, exclude: Collection[int], out: list[int]) -> None:
    """Move up to n keys not in `exclude` from the old end of `order` into `out`."""
    if n <= 0:
        return
    if not isinstance(exclude, (set, frozenset, dict)):
        exclude = set(exclude)
    # the scan in C: +protect's exclusions may sit at the old end, skipped on every step
    taken = list(islice(filterfalse(exclude.__contains__, order), n))
    for k in taken:
        del order[k]
    out.extend(taken)


REGISTRY = Registry("cache policy")
register = REGISTRY.register


def policy_names() -> tuple[str, ...]:
    return tuple(sorted(REGISTRY, key=lambda n: (REGISTRY[n].listed, n)))


def make_policy(name: str, n_slots: int, **opts) -> Policy:
    """Build a policy by name with the options its `Options` dataclass has; the others are
    ignored, so one option dict (hotlist, scratch, ...) can drive every policy of a sweep."""
    if name not in REGISTRY:
        raise SpecdecError(f"unknown cache policy {name!r}: use one of {', '.join(policy_names())}")
    cls = REGISTRY[name]
    known = {f.name for f in dataclasses.fields(cls.Options)}
    return cls.build(n_slots, cls.Options(**{k: v for k, v in opts.items() if k in known}))
