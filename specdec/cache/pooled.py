"""PooledCache: ExpertCache's interface over two caches, one per block size (mixed precision).

    cache = PooledCache(hot=ExpertCache(H, lru), cold=ExpertCache(C, lru), is_cold=mask)
    misses = cache.access([3, 17, 40])      # (key, slot): hot slots 0..H-1, cold H..H+C-1

Which pool a key lives in is fixed (the pack chose each expert's precision): `is_cold[key]`. Each
pool is an ordinary ExpertCache with its own policy over its own slots, so a miss evicts a block
of its own size and is read straight into the freed slot; a hot block never displaces cold ones
or the reverse. Slot ids are offset for the cold pool so the streamer sees one slot space
(store/pools.py: PoolArenas, PooledReader). Counters are the pools' sums.
"""

from __future__ import annotations

import numpy as np

from specdec.cache.expert_cache import ExpertCache, PassNotes, StepResult
from specdec.core.errors import SpecdecError

UNBOUNDED = 1 << 30  # a pool holding all of its experts limits no step


class PooledCache(PassNotes):
    """Two ExpertCaches behind one key and slot space."""

    def __init__(self, hot: ExpertCache, cold: ExpertCache, is_cold: np.ndarray, sizes=(0, 0)):
        if hot.n_scratch or cold.n_scratch:
            raise SpecdecError(
                "+scratch does not run on a mixed-precision pack (two slot pools): drop +scratch, "
                "or pack the model with one precision"
            )
        self.hot, self.cold = hot, cold
        self.is_cold = is_cold  # [n_keys] bool
        self.n_hot = hot.n_slots
        self.n_slots = hot.n_slots + cold.n_slots
        # a step's keys may all fall in one pool; a pool that holds all its experts bounds none
        caps = [
            p.max_step if p.n_slots < n else UNBOUNDED
            for p, n in zip((hot, cold), sizes, strict=True)
        ]
        self.max_step = min(caps)
        if hot.spec != cold.spec:  # one policy spec builds both pools (stream/mixed.py)
            raise ValueError(
                f"pools of one cache take one speculation option set: hot {hot.spec}, "
                f"cold {cold.spec}"
            )
        self.spec, self.noting = hot.spec, hot.noting  # +demote/+protect: note verify routing
        self._routing: list[tuple[int, np.ndarray]] = []  # this pass's verify calls (note)

    def _split(self, keys) -> tuple[list[int], list[int]]:
        cold = self.is_cold
        hot_keys, cold_keys = [], []
        for k in keys:
            (cold_keys if cold[k] else hot_keys).append(k)
        return hot_keys, cold_keys

    def _out(self, pairs: list[tuple[int, int]], cold: list[tuple[int, int]]):
        h = self.n_hot
        return pairs + [(k, s + h) for k, s in cold]

    # -- ExpertCache's interface -------------------------------------------------------------

    def step(self, keys: np.ndarray, counts: np.ndarray | None = None) -> StepResult:
        ks = keys.tolist()
        misses = self.access(ks, None if counts is None else counts.tolist())
        return StepResult(self.slots(ks), misses)

    def access(self, ks: list[int], counts: list[int] | None = None):
        hot, cold = self._split(ks)
        if counts is None:
            hc = cc = None
        else:
            n_of = dict(zip(ks, counts, strict=True))
            hc, cc = [n_of[k] for k in hot], [n_of[k] for k in cold]
        # an empty access is not a no-op for ExpertCache (it would hand out every free slot)
        return self._out(
            self.hot.access(hot, hc) if hot else [], self.cold.access(cold, cc) if cold else []
        )

    def slots(self, ks: list[int]) -> np.ndarray:
        return np.fromiter(map(self.slot_of, ks), np.int32, len(ks))

    def slot_of(self, key: int) -> int | None:
        if self.is_cold[key]:
            s = self.cold.slot_of(key)
            return None if s is None else s + self.n_hot
        return self.hot.slot_of(key)

    def tick(self, n_positions: int) -> None:
        self.hot.tick(n_positions)
        self.cold.tick(n_positions)

    def new_sequence(self) -> None:
        self._routing = []
        self.hot.new_sequence()
        self.cold.new_sequence()

    def judge(self, demote: list[int], protect: list[int]) -> None:
        """The pass's keys, worked out once (`verdict`); each pool demotes and protects only
        keys it holds."""
        self.hot.judge(demote, protect)
        self.cold.judge(demote, protect)

    def prefetch(self, keys, exclude=()) -> list[tuple[int, int]]:
        hot, cold = self._split(int(k) for k in keys)
        return self._out(self.hot.prefetch(hot, exclude), self.cold.prefetch(cold, exclude))

    def preload(self, keys: list[int] | None = None) -> list[tuple[int, int]]:
        if keys is None:
            return self._out(self.hot.preload(), self.cold.preload())
        hot, cold = self._split(keys)
        return self._out(self.hot.preload(hot), self.cold.preload(cold))

    def forget(self, keys) -> int:
        hot, cold = self._split(int(k) for k in keys)
        return self.hot.forget(hot) + self.cold.forget(cold)

    @property
    def version(self) -> int:
        return self.hot.version + self.cold.version  # each only grows: the sum moves with either

    def block_slots(self, base: int, n: int) -> np.ndarray | None:
        slots = list(map(self.slot_of, range(base, base + n)))
        if None in slots or self.hot.transient or self.cold.transient:
            return None  # a transient (static scratch) read may sit in this block: be safe
        return np.array(slots, dtype=np.int32)

    def resident_keys(self) -> list[int]:
        return sorted(self.hot.resident_keys() + self.cold.resident_keys())

    @property
    def accesses(self) -> int:
        return self.hot.accesses + self.cold.accesses

    @property
    def misses(self) -> int:
        return self.hot.misses + self.cold.misses

    @property
    def hits(self) -> int:
        return self.accesses - self.misses

    def stats(self) -> dict[str, int]:
        h, c = self.hot.stats(), self.cold.stats()
        out = {k: h[k] + c[k] for k in h}
        out.update({f"hot_{k}": v for k, v in h.items() if k in ("accesses", "misses")})
        out.update({f"cold_{k}": v for k, v in c.items() if k in ("accesses", "misses")})
        return out
