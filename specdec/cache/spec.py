"""`PolicySpec`: a cache policy as the user names it, parsed once where it enters.

    spec = PolicySpec.parse("lru+demote+protect")   # at the edge: --policy, Hydra's cache.policy
    spec = PolicySpec.parse("s3fifo+scratch")       # an eighth of the slots as verify scratch
    cache = spec.cache(96, hotlist=keys)            # an ExpertCache of that policy and options
    str(spec)                                       # "lru+demote+protect": its one label

A name is a registered policy (specdec.cache.policies: one file each) with the speculation-aware
options of specdec.cache.speculative after `+`. The trace simulator also replays what has no
runtime class (`offline=True`): the offline bounds (`OFFLINE`) and libCacheSim's policies
(`lcs:NAME`, checked by specdec.sim.lcs), which take no options.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.cache.expert_cache import ExpertCache
from specdec.cache.policies import REGISTRY, make_policy, policy_names
from specdec.cache.speculative import NO_SPEC, OPTIONS, SpecOptions, scratch_slots
from specdec.core.errors import SpecdecError

OFFLINE = ("belady", "opt_bypass", "knapsack_bound")  # offline bounds: the simulator's only
LCS_PREFIX = "lcs:"  # libCacheSim's policies, in the simulator


def policy_list() -> str:
    """`lru, slru, ... sieve or s3fifo`: the registered policies as help texts list them."""
    names = policy_names()
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


@dataclass(frozen=True)
class PolicySpec:
    name: str = "lru"
    options: SpecOptions = NO_SPEC

    @classmethod
    def parse(cls, text: str | PolicySpec, offline: bool = False) -> PolicySpec:
        """`NAME[+demote][+protect]` -> the spec; a one-line error for an unknown name or option.
        offline: the simulator's names too (OFFLINE bounds, `lcs:NAME`)."""
        if isinstance(text, PolicySpec):
            return text
        name, *opts = text.split("+")
        for o in opts:
            if o not in OPTIONS:
                raise SpecdecError(
                    f"policy {text!r}: unknown option +{o}; options are "
                    + ", ".join(f"+{x}" for x in OPTIONS)
                    + " (e.g. lru+demote+protect)"
                )
        if offline:
            known = name in REGISTRY or (
                not opts and (name in OFFLINE or name.startswith(LCS_PREFIX))
            )
            if not known:
                raise SpecdecError(
                    f"unknown policy {text!r}: use one of {', '.join(policy_names() + OFFLINE)}, "
                    "or lcs:NAME"
                )
        elif name not in REGISTRY:
            raise SpecdecError(
                f"unknown cache policy {name!r}: use one of {', '.join(policy_names())}"
            )
        return cls(name, SpecOptions(*(o in opts for o in OPTIONS)))

    def __str__(self) -> str:
        return self.name + self.options.suffix()

    @property
    def runtime(self) -> bool:
        """A policy the runtime's ExpertCache runs (not a bound or a libCacheSim peer)."""
        return self.name in REGISTRY

    @property
    def needs_hotlist(self) -> bool:
        return self.runtime and REGISTRY[self.name].needs_hotlist

    def cache(self, n_slots: int, **opts) -> ExpertCache:
        """An empty ExpertCache of this policy over n_slots slots (+scratch: its scratch
        slots, the last ones, held back from the policy's); `opts` as make_policy takes them."""
        n_scratch = scratch_slots(n_slots, self.options)
        n = n_slots - n_scratch
        return ExpertCache(n, make_policy(self.name, n, **opts), self.options, n_scratch)
