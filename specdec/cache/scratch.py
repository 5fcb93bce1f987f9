"""+scratch's part of ExpertCache: scratch slots outside the policy, resolved at the verdict.

    cache = PolicySpec.parse("lru+scratch").cache(96)   # 84 policy slots + 12 scratch
    cache.note(base, idx)          # a verify call: its first position's keys are the certain ones
    cache.access(keys)             # misses of drafted positions only -> scratch slots
    cache.verdict(accepted)        # committed scratch keys admitted (slot traded), others dropped

A mixin of specdec.cache.expert_cache.ExpertCache (it works on the cache's slot table, free list,
eviction and policy hooks); the option itself is specdec.cache.speculative's `scratch`.
"""

from __future__ import annotations

import numpy as np

from specdec.cache.speculative import committed_keys


class VerifyScratch:
    """Scratch slots n_slots .. n_slots + n_scratch - 1: key -> slot until the pass's verdict."""

    def _init_scratch(self, n_slots: int, n_scratch: int) -> None:
        self.n_scratch = n_scratch
        self._scratch_free = list(range(n_slots + n_scratch - 1, n_slots - 1, -1))
        self._scratch: dict[int, int] = {}
        self._certain: set[int] | None = None  # the next access: a verify step's first position
        self.scratch_reads = self.scratch_admitted = self.scratch_dropped = 0

    def verdict(self, accepted: int) -> None:
        """The noted pass's verdict (PassNotes); +scratch: then its scratch keys resolved."""
        committed = committed_keys(self._routing, accepted + 1) if self._scratch else None
        super().verdict(accepted)
        if committed is not None:
            self.resolve_scratch(committed)

    def speculative(self, certain) -> None:
        if self.n_scratch:
            self._certain = None if certain is None else set(np.asarray(certain).tolist())

    def _to_scratch(self, missed: list[int], certain: set[int]) -> list[tuple[int, int]]:
        """Scratch slots for the misses no committed position selected, while slots last."""
        free, out = self._scratch_free, []
        for k in missed:
            if not free:
                break
            if k not in certain:
                out.append((k, free.pop()))
        self._scratch.update(out)
        self._slot_of.update(out)
        self.scratch_reads += len(out)
        return out

    def resolve_scratch(self, committed: set[int]) -> None:
        """Admit the scratch keys in `committed` from their scratch copy (the scratch slot becomes
        the cache's, a free or evicted cache slot becomes scratch), drop the others."""
        if not self._scratch:
            return
        held, self._scratch = self._scratch, {}
        admitted = []
        for k, slot in sorted(held.items()):
            if k in committed and (self._free or self._evict(1, (), False)):
                self._scratch_free.append(self._free.pop())
                admitted.append(k)
            else:
                del self._slot_of[k]
                self._scratch_free.append(slot)
        self.scratch_admitted += len(admitted)
        self.scratch_dropped += len(held) - len(admitted)
        self.version += 1
        if admitted:
            dropped = self._admit(admitted)
            if dropped:
                self._transient = [*self._transient, *dropped]
