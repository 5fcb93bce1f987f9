"""Two slot pools for a mixed-precision pack: hot blocks and smaller cold blocks.

A mixed pack (`specdec pack --cold-bits`, store/requantize.py) has blocks of two sizes. Rather
than one arena whose slots fit the largest block, each precision gets its own arena of its own
slot size, its own reader and its own cache (cache/pooled.py): a miss is still one read straight
into a slot of its size, and which pool an expert lives in is fixed at pack time.

    hot, cold = pool_index(index, cold=False), pool_index(index, cold=True)
    plan = plan_pools("25%", index, top_k=8)    # a byte budget split over the two pools
    arenas = PoolArenas(Arena(plan.hot.n_slots, hot.slot_bytes, block_layout(hot)), ...)
    reader = PooledReader(ExpertReader(packed, hot, arenas.hot), ExpertReader(packed, cold, ...))

Slots are numbered across the pools: hot slots 0..H-1, cold slots H..H+C-1, so the streamer's
cache steps, reads and device slot tables stay those of one cache.

The split (`_hot_byte_share`): by default a byte budget B buys each pool the same share of its
own experts' bytes, B x (pool's bytes / all blocks' bytes), so `25%` holds a quarter of the hot
and a quarter of the cold experts. The hotlist's experts are the popular ones, so that starves
the hot pool; a pack made with `--hot-access-share f` (measured when the hotlist was profiled)
splits B as one LRU over both sizes would, in proportion to accesses x block size. Bytes one
pool cannot use (it holds all its experts) go to the other; `100%` holds every block; each pool
gets at least top-k slots (or all its experts, if fewer).
Run `pytest tests/pack/test_mixed_precision.py`.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence
from dataclasses import dataclass, fields

import mlx.core as mx
import numpy as np

from specdec.core.errors import BudgetError
from specdec.core.units import Budget, format_bytes
from specdec.store.arena import Arena, HugePages, arena_bytes
from specdec.store.budget import SlotPlan, available_memory
from specdec.store.layout import ALIGN, ExpertIndex, LayerLayout
from specdec.store.reader import ExpertReader, ReadStats, timed_wait


def members(ly: LayerLayout, cold: bool) -> np.ndarray:
    """[E] bool: the experts of this layer whose block is of that precision."""
    is_cold = ly.is_cold if ly.cold is not None else np.zeros(ly.n_experts, dtype=bool)
    return is_cold if cold else ~is_cold


def pool_index(index: ExpertIndex, cold: bool) -> ExpertIndex:
    """One pool's uniform view of a mixed index: every layer in that precision's layout, the
    other precision's experts at offset 0 with crc 0 (never read through this view)."""
    layers, slot = {}, 0
    for lid, ly in index.layers.items():
        member = members(ly, cold)
        base = ly.cold if cold and ly.cold is not None else ly
        if member.any():
            slot = max(slot, base.block_bytes)
        layers[lid] = LayerLayout(
            ly.prefix,
            ly.n_experts,
            base.block_bytes,
            base.tensors,
            np.where(member, ly.offsets, 0),
            np.where(member, ly.crc32, 0).astype(np.uint32),
            base.quant,
        )
    return ExpertIndex(index.version, slot or ALIGN, layers, index.source)  # ALIGN: no members


@dataclass(frozen=True)
class PoolPlan:
    """What a budget buys a mixed pack: one SlotPlan per pool."""

    hot: SlotPlan
    cold: SlotPlan

    @property
    def n_slots(self) -> int:
        return self.hot.n_slots + self.cold.n_slots

    @property
    def holds_all(self) -> bool:
        return self.hot.holds_all and self.cold.holds_all

    def stats(self) -> dict:
        h, c = self.hot, self.cold
        return {
            "cache_slots": self.n_slots,
            "cache_bytes": h.n_slots * h.slot_bytes + c.n_slots * c.slot_bytes,
            "arena_bytes": h.arena_bytes + c.arena_bytes,
            "requested_slots": h.requested_slots + c.requested_slots,
            "holds_all_experts": self.holds_all,
            "hot_slots": h.n_slots,
            "cold_slots": c.n_slots,
            "hot_slot_bytes": h.slot_bytes,
            "cold_slot_bytes": c.slot_bytes,
        }


def plan_pools(
    budget: Budget | str,
    index: ExpertIndex,
    top_k: int,
    resident_bytes: int = 0,
    layers: list[int] | None = None,
    available: int | None = None,
) -> PoolPlan:
    """Split `budget` (bytes, `N%` of every block's bytes, or `Nslots` of the hot size) over
    the two pools in proportion to their experts' bytes; see the module docstring."""
    lids = layers or index.layer_ids
    count = {c: sum(int(members(index.layers[lid], c).sum()) for lid in lids) for c in (0, 1)}
    views = {c: pool_index(index, bool(c)) for c in (0, 1)}
    pool_bytes = {c: count[c] * views[c].slot_bytes for c in (0, 1)}
    total = sum(pool_bytes.values())
    b = Budget.parse(budget)
    if b.percent is not None:
        want = total * b.percent / 100
    else:
        want = b.nbytes if b.slots is None else b.slots * index.slot_bytes
    share = _hot_byte_share(index, pool_bytes, views)
    cap = min(want, total)
    give = {0: min(cap * share, pool_bytes[0])}  # what one pool cannot use goes to the other
    give[1] = min(cap - give[0], pool_bytes[1])
    give[0] = min(cap - give[1], pool_bytes[0])
    plans = []
    for c in (0, 1):
        slot = views[c].slot_bytes
        asked = int(give[c] // slot)
        n = max(min(asked, count[c]), min(top_k, count[c]), 1)  # an arena has >= 1 slot
        plans.append(SlotPlan(str(budget), asked, n, count[c], slot, arena_bytes(n, slot)))
    plan = PoolPlan(*plans)
    need = plan.hot.arena_bytes + plan.cold.arena_bytes
    available = available_memory() if available is None else available
    if available is not None and need + resident_bytes > available:
        raise BudgetError(
            f"budget {budget} needs {format_bytes(need)} of expert cache (hot and cold pools) "
            f"plus {format_bytes(resident_bytes)} of resident weights, but only "
            f"{format_bytes(available)} of memory is available: lower the budget"
        )
    return plan


def _hot_byte_share(index: ExpertIndex, pool_bytes: dict, views: dict) -> float:
    """The hot pool's share of the budget's bytes. By default each pool's share of all blocks'
    bytes (each pool then holds the same share of its experts). A pack made with a measured
    `hot_access_share` f (the share of routed accesses that go to the hotlist's experts) splits
    as a single LRU over both sizes would hold them: bytes in proportion to accesses x block size,
    f s_hot : (1 - f) s_cold."""
    f = (index.source.get("cold") or {}).get("hot_access_share")
    if f is None:
        total = sum(pool_bytes.values())
        return pool_bytes[0] / total if total else 0.0
    hot, cold = f * views[0].slot_bytes, (1 - f) * views[1].slot_bytes
    return hot / (hot + cold)


@dataclass
class PoolArenas:
    """The hot and the cold arena; slot ids: hot first, then cold (offset by hot.n_slots)."""

    slot_ids = mx.int32  # signed: stream/mixed.py takes n_hot off a hot slot's id, then clips

    hot: Arena
    cold: Arena

    @property
    def n_hot(self) -> int:
        return self.hot.n_slots

    @property
    def huge_page_fraction(self) -> float | None:
        """Both arenas' measured huge-page share, weighted by bytes (None: neither measured)."""
        parts = [(a.huge_page_fraction, a.nbytes) for a in (self.hot, self.cold)]
        parts = [(f, n) for f, n in parts if f is not None]
        return sum(f * n for f, n in parts) / sum(n for _, n in parts) if parts else None


class PooledReader:
    """ExpertReader's interface over the two pools' readers: a request's slot says its pool."""

    def __init__(self, hot: ExpertReader, cold: ExpertReader) -> None:
        self.hot, self.cold = hot, cold
        self.n_hot = hot.arena.n_slots
        self.io = hot.io  # both read the same way
        self._waits = ReadStats()  # only blocked_s: time callers spent in wait()

    def read(self, requests: Sequence[tuple[int, int, int]]) -> None:
        self.wait(self.submit(requests))

    def submit(self, requests: Sequence[tuple[int, int, int]]) -> cf.Future:
        """Both pools' reads start now; the Future completes when both are in (or one failed)."""
        h = self.n_hot
        parts = [
            self.hot.submit([r for r in requests if r[2] < h]),
            self.cold.submit([(lay, e, s - h) for lay, e, s in requests if s >= h]),
        ]
        done: cf.Future = cf.Future()

        def finish(_: cf.Future) -> None:
            if all(p.done() for p in parts) and not done.done():
                errors = [p.exception() for p in parts if p.exception() is not None]
                if errors:
                    done.set_exception(errors[0])
                else:
                    done.set_result(None)

        for p in parts:
            p.add_done_callback(finish)
        return done

    def wait(self, future: cf.Future) -> None:
        timed_wait(future, self._waits)

    @property
    def staging_pages(self) -> list[HugePages]:
        return self.hot.staging_pages + self.cold.staging_pages

    @property
    def staging_huge_pages(self) -> float | None:
        return HugePages.combined(self.staging_pages).share

    @property
    def stats(self) -> ReadStats:
        """Both pools' counters summed (read_s: the sum of each pool's busy time)."""
        h, c = self.hot.stats, self.cold.stats
        out = ReadStats(**{f.name: getattr(h, f.name) + getattr(c, f.name) for f in fields(h)})
        out.blocked_s = self._waits.blocked_s
        return out

    def reset_stats(self) -> None:
        self.hot.reset_stats()
        self.cold.reset_stats()
        self._waits = ReadStats()

    def close(self) -> None:
        self.hot.close()
        self.cold.close()
