"""Speculation-aware cache options: what the cache does once a verify pass's verdict is known.

    spec = PolicySpec.parse("lru+demote+protect")   # specdec.cache.spec: (lru, SpecOptions(True, True))
    cache = spec.cache(n)
    demote, protect = verdict_keys([(base, idx)], n_true)  # idx [γ, k]: a pass's routing

A policy name may carry options after `+`, wherever a policy is named (`--policy`,
`cache.policy=`, `specdec simulate --policy`):

  demote   rejection-aware demotion: once the verdict is known, the experts that only rejected
           positions selected (no committed position did, at that layer) move to the eviction
           end: out of the policy, evicted before any key the policy orders, handed back to the
           policy (admitted, then hit) if a later step selects them first.
  protect  the experts of the pass's last committed position (the next token's likely set:
           consecutive tokens share a third to a half of their experts) are not evicted during
           the next pass while any other key can go instead.

Both change only which keys stay resident, never what is computed: decoding stays exact. The
runtime (specdec.stream.streamer notes each verify call's routing, the decode loop reports the
verdict) and the replay (specdec.sim.replay) compute the keys with the same `verdict_keys`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPTIONS = ("demote", "protect")


@dataclass(frozen=True)
class SpecOptions:
    demote: bool = False
    protect: bool = False

    def __bool__(self) -> bool:
        return self.demote or self.protect

    def suffix(self) -> str:
        return "".join(f"+{o}" for o in OPTIONS if getattr(self, o))


NO_SPEC = SpecOptions()  # plain caching: no verdict hook runs


def verdict_keys(routing: list[tuple[int, np.ndarray]], n_true: int) -> tuple[list[int], list[int]]:
    """(keys to demote, keys to protect) of one verify pass.

    routing: (key base, idx [..., positions, k]) per MoE call of the pass, positions in order
    (a call's keys are base + expert); n_true: the positions whose input was committed (the
    pass's first and its accepted drafts). Demote: keys only positions >= n_true selected;
    protect: the keys of position n_true - 1."""
    demote: list[int] = []
    protect: list[int] = []
    for base, idx in routing:
        rows = idx.reshape(-1, idx.shape[-1])  # [γ, k]
        n = min(n_true, len(rows))
        protect.extend((rows[n - 1] + base).tolist())
        if len(rows) > n:
            gone = np.setdiff1d(rows[n:], rows[:n])  # [≤ (γ - n)·k] sorted, distinct
            demote.extend((gone + base).tolist())
    return demote, protect
