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

  scratch  a verify pass's misses that only its drafted positions select (not its first,
           committed position) are read into scratch slots, held back from the budget
           (`scratch_slots`: an eighth of the slots), and not admitted; once the verdict is
           known the keys of committed positions are admitted from the scratch copy (the
           scratch slot joins the cache, a freed or evicted cache slot joins the scratch: no
           second read), the others dropped. A step whose speculative misses outnumber the free
           scratch slots admits the rest as usual.

All three change only which keys stay resident, never what is computed: decoding stays exact. The
runtime (specdec.stream.streamer notes each verify call's routing, the decode loop reports the
verdict) and the replay (specdec.sim.replay) compute the keys with the same `verdict_keys`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPTIONS = ("demote", "protect", "scratch")
SCRATCH_SHARE = 8  # +scratch holds back 1/8 of the slots


@dataclass(frozen=True)
class SpecOptions:
    demote: bool = False
    protect: bool = False
    scratch: bool = False

    def __bool__(self) -> bool:
        return self.demote or self.protect or self.scratch

    def suffix(self) -> str:
        return "".join(f"+{o}" for o in OPTIONS if getattr(self, o))


NO_SPEC = SpecOptions()  # plain caching: no verdict hook runs


def scratch_slots(n_slots: int, spec: SpecOptions) -> int:
    """The slots +scratch holds back from a cache of n_slots (0 without it)."""
    return max(1, n_slots // SCRATCH_SHARE) if spec.scratch and n_slots > 1 else 0


def committed_keys(routing: list[tuple[int, np.ndarray]], n_true: int) -> set[int]:
    """The keys the first n_true positions of a pass's routing selected (see verdict_keys)."""
    out: set[int] = set()
    for base, idx in routing:
        rows = idx.reshape(-1, idx.shape[-1])[:n_true]  # [n_true, k]
        out.update((rows[rows >= 0] + base).tolist())
    return out


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
