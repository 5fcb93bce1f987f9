"""ExpertCache: the slot table of routed experts under a fixed number of slots, one per cache.

    cache = ExpertCache(n_slots=96, policy=make_policy("lru", 96))
    res = cache.step(np.array([3, 17, 40]), counts=np.array([2, 1, 1]))   # one MoE layer
    for key, slot in res.misses: reader.read(key, into=slot)               # caller's reads
    ... compute with res.slots ...                                          # [|S|] int32
    cache.tick(n_positions)                                                # once per forward

A step is one MoE layer of one forward call: S = the sorted distinct keys any position selected,
counts[i] = positions that selected S[i]. Resident members of S are hits (touched ascending),
then each miss (ascending) is admitted, evicting while full a key the policy picks among the
resident keys NOT in S. Slots returned by a step stay valid until the next step or prefetch.
A step may select at most `max_step` keys (n_slots; static: its scratch slots), else it raises
BudgetError naming the minimum: callers split wider steps into chunks of at most `max_step`.
The simulator (specdec.sim.simulate) drives the very same object through `access()`.

Prefetch (router lookahead): `prefetch(keys, exclude)` admits keys into free slots or over
victims not in `exclude`. A prefetched key is held outside the policy, at the lowest protection
(evicted first, oldest prefetch first) until a demand hit hands it to the policy as an admission
followed by a hit; it then counts as a hit and a `prefetch_hit`; evicted unhit, `prefetch_wasted`.

Speculation-aware options (specdec.cache.speculative): the streamer `note`s each verify call's
routing, the decode loop reports the pass's `verdict`; with `demote`, keys only rejected
positions selected leave the policy for a queue evicted right after unhit prefetches (a demand
hit hands one back to the policy as an admission followed by a hit, like a prefetch); with
`protect`, the last committed position's keys are evicted during the next pass only when
nothing else can go; with `scratch`, a noted verify step's misses that only its drafted
positions select go to scratch slots (ids n_slots .. n_slots + n_scratch - 1, outside the
policy; a later hit serves them, the policy unaware) and the verdict admits the committed
positions' ones by trading the scratch slot for a cache slot, dropping the rest. Without
options `note` is never called and `verdict` returns at once.

Failed reads: `forget(keys)` drops keys whose read failed, so a slot holding a partial or stale
block is never handed out as a hit; the next access reads the block again.

Residency: `version` changes whenever a key enters or leaves a slot; `block_slots(base, n)` gives
the slots of keys base..base+n-1 when all are resident and none is transient. While the version
stands, a step over those keys is all hits and moves nothing, so a caller may compute on those
slots first and run the step later (specdec.stream.streamer's device slot tables).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from typing import Protocol

import numpy as np

from specdec.cache.policies import Policy, _pop_oldest
from specdec.cache.scratch import VerifyScratch
from specdec.cache.speculative import NO_SPEC, SpecOptions, verdict_keys
from specdec.core.errors import BudgetError, SpecdecError


class PassNotes:
    """The speculation-aware verdict protocol shared by a cache and a cache of pools: a pass's
    verify calls noted, then judged once (`judge`: demote and protect keys) when the verdict is
    known. The class keeps `_routing` (list of (base, idx)) and defines `judge`."""

    _routing: list[tuple[int, np.ndarray]]
    n_scratch: int = 0  # scratch slots (+scratch; VerifyScratch sets it)

    def note(self, base: int, idx: np.ndarray) -> None:
        """A verify call's routing idx [..., positions, k] (keys base + expert), for `verdict`;
        with +scratch its next access learns the keys of the call's first position."""
        self._routing.append((base, idx))
        if self.n_scratch:  # only +scratch reads the first position's keys (per layer: skip)
            rows = idx.reshape(-1, idx.shape[-1])  # [γ, k]
            self.speculative(rows[0] + base if len(rows) > 1 else None)

    def speculative(self, certain) -> None:
        """The next access is a verify step whose first position selected `certain` (keys; the
        rest are drafted positions' only); None: an ordinary step. Only +scratch acts on it."""

    def verdict(self, accepted: int) -> None:
        """The noted pass's verdict: its first 1 + accepted positions were committed."""
        if self._routing:
            routing, self._routing = self._routing, []
            self.judge(*pass_verdict(routing, accepted))


@dataclass
class StepResult:
    """Where the keys of one step live, and which of them the caller must read first."""

    slots: np.ndarray  # [|S|] int32, aligned with the step's keys
    misses: list[tuple[int, int]]  # (key, slot) to fill from disk before computing


class Ordered(Protocol):
    """A cache `adopt` can take: its policy, and its keys in that policy's order where the order
    is its whole state, else None (ExpertCache, CountingLRU)."""

    policy: Policy

    def held_order(self) -> list[int] | None: ...


class ExpertCache(VerifyScratch, PassNotes):
    """Fixed slots, one eviction policy; counters for accesses, hits, misses, evictions."""

    def __init__(self, n_slots: int, policy: Policy, spec: SpecOptions = NO_SPEC, n_scratch=0):
        if spec.demote and not policy.demotable:
            raise SpecdecError(
                f"policy {policy.name} cannot demote (its keys are pinned): drop +demote"
            )
        if n_slots != policy.n_slots:
            raise BudgetError(
                f"cache has {n_slots} slots but its policy was built for {policy.n_slots}: "
                "build both with the same slot count"
            )
        self.n_slots = n_slots
        self.policy = policy
        self.max_step = policy.max_step()
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = list(range(n_slots - 1, -1, -1))  # pop() hands out slot 0 first
        self._transient: Sequence[int] = ()  # keys the policy did not keep, freed at the next step
        self._prefetched: OrderedDict[int, None] = OrderedDict()  # resident, not yet demand-hit
        self.accesses = self.misses = self.evictions = 0  # hits: a property
        self.prefetch_reads = self.prefetch_hits = self.prefetch_wasted = 0
        self.preload_reads = self.forgotten = self.resync_reads = 0
        self.version = 0  # bumped whenever a key enters or leaves a slot
        self.spec = spec
        self.noting = bool(spec)  # the streamer notes verify routing only then
        self._routing: list[tuple[int, np.ndarray]] = []  # this pass's verify calls (note)
        self._demoted: OrderedDict[int, None] = OrderedDict()  # resident, out of the policy
        self._protected: set[int] = set()
        self.demoted = self.demoted_hits = self.demoted_evicted = 0
        self._init_scratch(n_slots, n_scratch)
        # the policy's hooks, bound once: the hot path calls them for every step
        self._uses_select = policy.uses_select
        self._select, self._hit = policy.select, policy.hit
        self._admit, self._victims = policy.admit, policy.victims

    # -- the hot path ------------------------------------------------------------------------

    def step(self, keys: np.ndarray, counts: np.ndarray | None = None) -> StepResult:
        """One MoE layer of one forward call; keys sorted and distinct, counts aligned."""
        ks = keys.tolist()
        misses = self.access(ks, None if counts is None else counts.tolist())
        return StepResult(self.slots(ks), misses)

    def slots(self, ks: list[int]) -> np.ndarray:
        """[len(ks)] int32 slots of resident keys (valid until the next step or prefetch)."""
        return np.fromiter(map(self._slot_of.__getitem__, ks), np.int32, len(ks))

    def access(self, ks: list[int], counts: list[int] | None = None) -> list[tuple[int, int]]:
        """`step` on plain lists, returning only the (key, slot) misses: the simulator's entry.
        Written for speed (millions of accesses per second): C-level iteration where possible
        (filter over dict.__contains__, map over dict.pop), few attribute lookups."""
        n = len(ks)
        if n > self.max_step:
            raise BudgetError(too_wide(n, self.max_step, self.n_slots))
        certain, self._certain = self._certain, None  # a chunked verify step: its first chunk
        slot_of = self._slot_of
        if self._transient:
            self._free.extend(map(slot_of.pop, self._transient))
            self._transient = ()
            self.version += 1
        if self._uses_select:
            self._select(ks, counts)
        self.accesses += n
        missed = list(filterfalse(slot_of.__contains__, ks))
        m = len(missed)
        if m < n:
            hit_keys = list(filter(slot_of.__contains__, ks)) if m else ks
            if self._scratch:  # scratch copies serve the hit; the verdict decides on them
                hit_keys = [k for k in hit_keys if k not in self._scratch]
            if self._prefetched or self._demoted:
                self._claim(hit_keys)
            self._hit(hit_keys)
            if not m:
                return missed
        self.misses += m
        self.version += 1
        scratch: list[tuple[int, int]] = []
        if certain is not None and self._scratch_free:
            scratch = self._to_scratch(missed, certain)
            if scratch:
                missed = [k for k in missed if k not in self._scratch]
                m = len(missed)
                if not m:
                    return scratch
        free = self._free
        if m > len(free):
            self._evict(m - len(free), ks, True)
        taken = free[-m:]  # the slots free.pop() would hand out, in the same order
        del free[-m:]
        out = list(zip(missed, reversed(taken), strict=True))
        slot_of.update(out)
        dropped = self._admit(missed)
        if dropped:
            self._transient = dropped
        return out + scratch if scratch else out

    def count_hits(self, n: int) -> None:
        """n accesses that hit, counted without a step (Streamer.counted): the policy is not told,
        as every key is resident and the cache holds them all, so its order chooses nothing."""
        self.accesses += n

    @property
    def hits(self) -> int:
        return self.accesses - self.misses

    def tick(self, n_positions: int) -> None:
        """Once per forward call, after its steps, with its number of positions."""
        self.policy.tick(n_positions)

    def new_sequence(self) -> None:
        """A prefill from position 0 begins: policies with per-sequence state reset it."""
        self._routing, self._protected = [], set()
        self.resolve_scratch(set())
        self.policy.new_sequence()

    # -- speculation-aware options -----------------------------------------------------------

    def judge(self, demote: list[int], protect: list[int]) -> None:
        """Demote and protect these keys (as the options say) until the next verdict."""
        if self.spec.demote:
            held = self._slot_of
            skip = self._prefetched.keys() | self._demoted.keys() | set(self._transient)
            skip |= self._scratch.keys()  # not the policy's: the verdict resolves them next
            keys = [k for k in demote if k in held and k not in skip]
            if keys:
                self.policy.remove(keys)
                self._demoted.update(dict.fromkeys(keys))
                self.demoted += len(keys)
        if self.spec.protect:
            self._protected = set(protect)

    # -- prefetch and preload ----------------------------------------------------------------

    def prefetch(self, keys, exclude=()) -> list[tuple[int, int]]:
        """Admit the keys not resident, in order, never evicting a key of `exclude` or of `keys`;
        returns (key, slot) to read. Stops early when no resident key may be evicted."""
        if not self.policy.prefetchable:
            return []
        wanted = list(dict.fromkeys(int(k) for k in keys))  # numpy ints become Python ints
        exclude = {int(k) for k in exclude}.union(wanted)  # nor evict a key this call asks for
        slot_of, free, out = self._slot_of, self._free, []
        for k in wanted:
            if k in slot_of:
                continue
            if not free and not self._evict(1, exclude, False):
                break
            s = free.pop()
            slot_of[k] = s
            self._prefetched[k] = None
            out.append((k, s))
        self.prefetch_reads += len(out)
        self.version += bool(out)
        return out

    def preload(self, keys: list[int] | None = None) -> list[tuple[int, int]]:
        """Admit `keys` (default: the policy's preload keys, hotlist seeding) into free slots;
        (key, slot) to read. Call on a fresh cache, before the first step."""
        keys = self.policy.preload_keys() if keys is None else keys
        keys = [k for k in keys if k not in self._slot_of]
        keys = keys[: len(self._free)]
        out = []
        for k in keys:
            s = self._free.pop()
            self._slot_of[k] = s
            out.append((k, s))
        self.policy.admit(keys)
        self.preload_reads += len(out)
        self.version += bool(out)
        return out

    def adopt(self, other: Ordered) -> list[tuple[int, int]]:
        """Take `other`'s state: hold exactly its keys, in its policy's order, so that from
        here on both read alike whatever they are asked (`--gamma auto`'s re-sync to plain
        decoding's shadow, specdec.gamma.chooser). Keys `other` lacks leave their slots; its
        keys not resident here get slots: (key, slot) to read, as a step's misses. Only where
        the policy's order is its whole state (LRU) and nothing is held outside it (no
        prefetch, demote or scratch in flight)."""
        order = other.held_order()
        if order is None:
            raise SpecdecError(f"policy {other.policy.name} has no order to take")
        if self._prefetched or self._demoted or self._transient or self._scratch:
            raise SpecdecError("a cache holding keys outside its policy cannot take another's")
        want = dict.fromkeys(order)
        if len(want) > self.n_slots:
            raise SpecdecError(
                f"a cache of {self.n_slots} slots cannot take one holding {len(want)} keys: "
                "give it a cache of at most its size"
            )
        self.policy.adopt(order)  # first: a policy that cannot (not LRU) refuses before a change
        leave = [k for k in self._slot_of if k not in want]
        self._free.extend(map(self._slot_of.pop, leave))
        out = [(k, self._free.pop()) for k in order if k not in self._slot_of]
        self._slot_of.update(out)
        self.resync_reads += len(out)
        self.version += bool(out or leave)
        return out

    def held_order(self) -> list[int] | None:
        """Its keys, first evicted first, where the policy's order is its whole state (LRU;
        `Policy.held_order`), else None."""
        return self.policy.held_order()

    def forget(self, keys) -> int:
        """Drop resident keys whose read failed; their slots become free. Returns how many."""
        held = []  # keys the policy orders (not unhit prefetches, not static's scratch reads)
        n = 0
        for k in dict.fromkeys(int(k) for k in keys):
            slot = self._slot_of.pop(k, None)
            if slot is None:
                continue
            n += 1
            if k in self._scratch:
                del self._scratch[k]
                self._scratch_free.append(slot)
                continue
            self._free.append(slot)
            if k in self._prefetched:
                del self._prefetched[k]
            elif k in self._demoted:
                del self._demoted[k]
            elif k in self._transient:
                self._transient = [t for t in self._transient if t != k]
            else:
                held.append(k)
        if held:
            self.policy.remove(held)
        self.forgotten += n
        self.version += bool(n)
        return n

    # -- inspection --------------------------------------------------------------------------

    def slot_of(self, key: int) -> int | None:
        return self._slot_of.get(key)

    @property
    def transient(self) -> Sequence[int]:
        """Keys read for one step only (static's scratch reads), freed at the next step."""
        return self._transient

    def block_slots(self, base: int, n: int) -> np.ndarray | None:
        """[n] int32 slots of keys base..base+n-1 if every one is resident and none is a
        transient (static scratch) read freed at the next step; else None."""
        slots = list(map(self._slot_of.get, range(base, base + n)))  # C-level: ~3 µs for 256
        if None in slots or any(base <= k < base + n for k in (*self._transient, *self._scratch)):
            return None
        return np.array(slots, dtype=np.int32)

    def resident_keys(self) -> list[int]:
        """Keys occupying slots now (static's scratch reads until the next step included)."""
        return sorted(self._slot_of)

    def stats(self) -> dict[str, int]:
        names = ("accesses", "hits", "misses", "evictions", "preload_reads", "forgotten")
        names += ("resync_reads",) if self.resync_reads else ()
        names += ("prefetch_reads", "prefetch_hits", "prefetch_wasted")
        if self.n_scratch:
            names += ("n_scratch", "scratch_reads", "scratch_admitted", "scratch_dropped")
        return {n: getattr(self, n) for n in names}

    # -- internals ---------------------------------------------------------------------------

    def _claim(self, hit_keys: list[int]) -> None:
        """Hand prefetched and demoted keys that a demand step hits over to the policy."""
        claimed = []
        for held, what in ((self._prefetched, "prefetch_hits"), (self._demoted, "demoted_hits")):
            mine = [k for k in hit_keys if k in held]
            for k in mine:
                del held[k]
            setattr(self, what, getattr(self, what) + len(mine))
            claimed += mine
        if claimed:
            self.policy.admit(sorted(claimed))

    def _evict(self, n: int, exclude: Collection[int], in_step: bool) -> int:
        """Free n slots: protected keys last (when protecting), see _evict_from."""
        protected = self._protected
        if not protected:
            return self._evict_from(n, exclude, in_step)
        added = [k for k in exclude if k not in protected]  # the step's keys, for this call only
        protected.update(added)  # no copy of the protected set per step
        try:
            got = self._evict_from(n, protected, False)
        finally:
            protected.difference_update(added)
        if got < n:
            got += self._evict_from(n - got, exclude, False)
        return got

    def _evict_from(self, n: int, exclude: Collection[int], in_step: bool) -> int:
        """Free n slots: unhit prefetches first, then demoted keys, then the policy's victims.
        Returns freed."""
        victims: list[int] = []
        if self._prefetched:
            _pop_oldest(self._prefetched, n, exclude, victims)
            self.prefetch_wasted += len(victims)
        if self._demoted and len(victims) < n:
            before = len(victims)
            _pop_oldest(self._demoted, n - before, exclude, victims)
            self.demoted_evicted += len(victims) - before
        if len(victims) < n:
            victims += self._victims(n - len(victims), exclude, in_step)
        self._free.extend(map(self._slot_of.pop, victims))
        self.evictions += len(victims)
        return len(victims)


def too_wide(n: int, max_step: int, n_slots: int) -> str:
    """The error for a step of `n` distinct keys over a cache whose steps hold `max_step`."""
    if max_step < n_slots:
        return (
            f"a step selects {n} experts but the static policy has {max_step} scratch "
            f"slots: pass scratch>={n} (and at least {n} slots)"
        )
    return (
        f"a step selects {n} distinct experts but the cache has {n_slots} slots: "
        f"raise the budget to at least {n} slots or split the step"
    )


def position_chunks(flat_idx: np.ndarray, width: int) -> list[np.ndarray]:
    """Consecutive groups of positions of `flat_idx` [N, k] whose union holds <= width experts."""
    k = flat_idx.shape[-1]
    if k > width:
        raise BudgetError(
            f"a cache step holds at most {width} experts but one position selects {k}: "
            "raise the budget (or the static policy's scratch)"
        )
    chunks, start = [], 0
    while start < len(flat_idx):
        seen: set[int] = set()
        end = start
        while end < len(flat_idx):
            grown = seen.union(flat_idx[end].tolist())
            if len(grown) > width:
                break
            seen, end = grown, end + 1
        chunks.append(flat_idx[start:end])
        start = end
    return chunks


def pass_verdict(
    routing: list[tuple[int, np.ndarray]], accepted: int
) -> tuple[list[int], list[int]]:
    """(keys to demote, keys to protect) of one noted pass (`note`'s calls) whose first
    1 + accepted positions were committed."""
    rows = [idx.reshape(-1, idx.shape[-1]) + base for base, idx in routing]  # [γ, k]
    if len({r.shape[0] for r in rows}) == 1:  # one set operation for the whole pass
        rows = [np.concatenate(rows, axis=1)]  # [γ, L·k]
    return verdict_keys([(0, r) for r in rows], accepted + 1)
