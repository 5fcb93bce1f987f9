"""Counterfactual caches for `--gamma auto`: what plain decoding and each fixed γ would read.

    shadows = Shadows(lambda: build(), gammas=range(2, 9), seed=0, layers=L)
    shadows.preload(keys)                       # as the live cache starts
    report = shadows.feed(committed, alphas)    # committed: [n, L, k] cache keys of a pass
    report.plain_misses                         # [n, L] plain decoding's misses per position
    report.passes                               # ShadowPass per lane pass that could now run

Each shadow is a cache of the run's policy and size that sees nothing but the committed tokens'
routing, replayed as one decoding strategy would have read it (a plain LRU's only counts:
specdec.cache.counting_lru, its L MoE layers a forward stepped at once where they are many):

- plain (the reference of auto's bytes rule and guard): one position per forward, then tick(1);
- one lane per candidate γ: passes of γ positions over the committed stream; the pass's
  acceptance drawn from the live per-draft acceptance (`alphas`, GammaChooser.alphas()) with a
  seeded rng, the lane's next pass starting after the accepted ones. A lane needs its γ
  positions committed, so it lags the run by up to γ tokens.

So each γ's misses are measured on the cache *that γ keeps*, not on the one the run's other γ
left (a probe pass after plain blocks sees plain's cache; a block of γ sees its own only after
settling, and each block of another γ disturbs it).

A lane's positions past its drawn acceptance stand for rejected drafts, whose routing is
unknown for a pass that never ran. They are routed as replay's routing model routes them
(specdec.sim.replay.rejected_routing): each expert of the position before kept with the
probability that consecutive committed tokens share an expert (measured on this text, per run),
the rest taken from a committed token drawn from the last HISTORY. Bias, stated: a real
rejected draft's experts also follow its own context (this draws popularity from the recent
text only), and routing the rejected positions as the next committed tokens instead made wide γ
read up to 15% less in its lane than in the real replay (MiniMax trace, 50%, α 0.95: lanes
1.00x plain, replay 1.17x); with this model lanes came within about 5% of the fixed-γ replays
there and at 5% (α 0.95, γ 2-8). Speculation-aware cache options (demote/protect) are not
applied in lanes (no verdicts reach them). The guard on the run's actual totals (gamma.py)
bounds what any error here can cost.
Tests: `pytest tests/gamma/test_gamma_auto.py`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from specdec.cache.batched_lru import BatchedLRU
from specdec.cache.counting_lru import CountingLRU, counting
from specdec.cache.expert_cache import ExpertCache, position_chunks
from specdec.core.errors import SpecdecError

HISTORY = 256  # committed positions a lane's rejected drafts draw their routing from
SMALL_PASS = 256  # keys in a pass below which an uncounted `pass_keys` sorts in Python (4x faster)


@dataclass(frozen=True)
class ShadowPass:
    """One lane pass: γ positions, `committed` of them accepted, reads per layer."""

    gamma: int
    committed: int
    union: np.ndarray  # [L]
    misses: np.ndarray  # [L]


@dataclass(frozen=True)
class ShadowReport:
    plain_misses: np.ndarray  # [n, L] plain decoding's misses per position just fed
    passes: tuple[ShadowPass, ...]  # lane passes that completed with them


def pass_keys(keys: np.ndarray, counted: bool = True) -> list[tuple[list[int], list[int] | None]]:
    """Per layer, (distinct sorted keys, positions selecting each) of a pass over positions
    `keys` [n, L, k] (cache keys), as the lists a cache step takes; not `counted` (a cache that
    orders by recency alone: a counting LRU), None for the counts, and a pass of few keys (the
    bundled model's 4 layers) in Python: its sets and sorts cost a fifth of numpy's calls."""
    n, L, k = keys.shape
    if not counted and n * L * k <= SMALL_PASS:
        return [(sorted(set(row)), None) for row in keys.transpose(1, 0, 2).reshape(L, -1).tolist()]
    flat, first = _sorted_rows(keys)
    if not counted:
        return [(ks, None) for ks in _by_row(flat[first], first)]
    # every row's distinct keys, row after row, found once for all rows (not once per row: 62
    # layers' worth of small numpy calls cost 12x more); a row always starts with a first
    # occurrence, so a key's count never runs into the next row
    at = np.flatnonzero(first)  # [u]
    ends = np.empty_like(at)  # [u] where each key's run ends (np.diff's call costs more)
    ends[:-1] = at[1:]
    ends[-1] = first.size
    return list(zip(_by_row(flat.ravel()[at], first), _by_row(ends - at, first), strict=True))


def _sorted_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([L, n·k] each layer's keys of positions `keys` [n, L, k], sorted; [L, n·k] whether each
    is its value's first occurrence in its row)."""
    n, L, k = keys.shape
    flat = np.sort(keys.transpose(1, 0, 2).reshape(L, n * k), axis=1)  # [L, n·k]
    first = np.empty(flat.shape, bool)  # [L, n·k]
    first[:, 0] = True
    np.not_equal(flat[:, 1:], flat[:, :-1], out=first[:, 1:])
    return flat, first


def _by_row(values: np.ndarray, first: np.ndarray) -> list[list[int]]:
    """[u] values of the first occurrences `first` [L, n·k] marks, split into their rows."""
    out = values.tolist()
    bounds = [0, *np.cumsum(first.sum(1)).tolist()]  # row li: [li, li + 1)
    return [out[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def access_pass(
    cache: ExpertCache | CountingLRU | BatchedLRU, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One forward over positions `keys` [n, L, k]: a step per layer over its union (or, where
    the union exceeds a cache step, one per group of positions that fits, as the streamer
    splits it), then tick(n). Returns ([L] union summed over steps, [L] misses)."""
    n, L, _ = keys.shape
    if isinstance(cache, BatchedLRU):  # every layer's step at once, where each fits a step
        flat, first = _sorted_rows(keys)
        layer, col = first.nonzero()  # [u] each distinct key's layer (ascending), column
        union = np.bincount(layer, minlength=L)  # [L]
        if union.max() <= cache.max_step:
            missed = cache.steps(flat[layer, col], layer, L)  # [u]
            cache.tick(n)
            return union.astype(np.float64), np.bincount(layer[missed], minlength=L).astype(
                np.float64
            )
    counted = isinstance(cache, ExpertCache)  # a counting LRU orders by recency alone
    union, misses = [0] * L, [0] * L  # [L] each
    for li, (ks, counts) in enumerate(pass_keys(keys, counted)):
        if len(ks) <= cache.max_step:
            steps = [(ks, counts)]
        else:
            chunks = position_chunks(keys[:, li], cache.max_step)
            steps = [pass_keys(c[:, None], counted)[0] for c in chunks]
        for part, part_counts in steps:
            union[li] += len(part)
            misses[li] += len(cache.access(part, part_counts))
    cache.tick(n)
    return np.array(union, np.float64), np.array(misses, np.float64)


def shadow_plain(shadow: ExpertCache | CountingLRU | BatchedLRU, keys: np.ndarray) -> np.ndarray:
    """[n, L] misses plain decoding has at each committed position of `keys` [n, L, k] (cache
    keys): each position one forward of one step per layer, then tick(1). Per position, not
    summed: plain's modeled time is a sum over its own one-token passes (reads come whole)."""
    if isinstance(shadow, BatchedLRU):  # a position's layers at once (its k experts distinct)
        out = [access_pass(shadow, position[None])[1] for position in keys]  # [L] each
        return np.array(out).reshape(keys.shape[:2])
    misses = np.zeros(keys.shape[:2])  # [n, L]
    for t, position in enumerate(keys):  # [L, k]
        for li, ks in enumerate(position.tolist()):
            misses[t, li] = len(shadow.access(sorted(ks)))
        shadow.tick(1)
    return misses


def divergence(run: ExpertCache, plain: ExpertCache | CountingLRU | BatchedLRU) -> tuple[int, bool]:
    """(blocks `plain` holds that `run` lacks, whether both hold the same keys in the same
    order): what re-syncing the run's cache to plain's shadow reads (`ExpertCache.adopt`), and
    whether it is already plain's, so that plain decoding reads alike on both from here on."""
    mine, theirs = run.held_order(), plain.held_order()
    if mine is None or theirs is None:
        raise SpecdecError("only an LRU cache is compared with plain's shadow")
    return len(set(theirs).difference(mine)), mine == theirs


class Shadows:
    """Plain decoding's shadow cache and one lane per candidate γ (module doc)."""

    def __init__(
        self,
        make_cache: Callable[[], ExpertCache],
        gammas: Iterable[int],
        seed: int,
        layers: int = 1,
    ):
        # a plain LRU's shadows only count (specdec.cache.counting_lru): the same misses, the
        # same order, a fraction of the host time a pass of bookkeeping takes; `layers` (the
        # MoE layers a position routes) picks how
        self.plain = counting(make_cache(), layers)
        self.lanes = {g: counting(make_cache(), layers) for g in gammas if g > 1}
        self._at = dict.fromkeys(self.lanes, 0)  # position of each lane's next pass
        self._keys: list[np.ndarray] = []  # [L, k] per committed position from _base on
        self._base = 0
        self._past: deque[np.ndarray] = deque(maxlen=HISTORY)  # [L, k] recent committed
        self._overlap = np.zeros(2)  # experts shared by consecutive committed tokens; pairs
        self._rng = np.random.default_rng([seed, 2])

    def _caches(self) -> list[ExpertCache | CountingLRU | BatchedLRU]:
        return [self.plain, *self.lanes.values()]

    def preload(self, keys: list[int] | None = None) -> None:
        for c in self._caches():
            c.preload(keys)

    def feed(self, keys: np.ndarray, alphas: np.ndarray) -> ShadowReport:
        """Positions `keys` [n, L, k] just committed; `alphas` [G - 1] the live acceptance of
        draft 1..G-1. Runs plain on them and every lane pass they complete."""
        plain = shadow_plain(self.plain, keys)
        pairs = np.concatenate([self._past[-1][None], keys]) if self._past else keys  # [m, L, k]
        same = (pairs[1:, :, :, None] == pairs[:-1, :, None, :]).any(-1)  # [m - 1, L, k]
        self._overlap += (same.mean(-1).sum(), same.shape[0] * same.shape[1])
        self._keys.extend(keys)
        self._past.extend(keys)
        end = self._base + len(self._keys)
        passes = []
        for g in self.lanes:
            while self._at[g] + g <= end:
                passes.append(self._pass(g, g, alphas))
        self._trim()
        return ShadowReport(plain, tuple(passes))

    def new_sequence(self, alphas: np.ndarray) -> None:
        """A new prompt: each lane runs the positions left as passes that stop at the boundary
        (as the run's own do), then every cache starts a sequence."""
        end = self._base + len(self._keys)
        for g in self.lanes:
            while self._at[g] < end:
                self._pass(g, min(g, end - self._at[g]), alphas)
        self._trim()
        for c in self._caches():
            c.new_sequence()

    def _pass(self, g: int, n: int, alphas: np.ndarray) -> ShadowPass:
        accepted = 0
        while accepted < n - 1 and self._rng.random() < alphas[accepted]:
            accepted += 1
        start = self._at[g] - self._base
        window = np.array(self._keys[start : start + n])  # [n, L, k]
        rho = self._overlap[0] / max(self._overlap[1], 1.0)
        for i in range(accepted + 1, n):  # a rejected draft (module doc)
            other = self._past[self._rng.integers(len(self._past))]  # [L, k]
            keep = self._rng.random(other.shape) < rho  # [L, k]
            window[i] = np.where(keep, window[i - 1], other)
        union, misses = access_pass(self.lanes[g], window)
        self._at[g] += accepted + 1
        return ShadowPass(g, accepted + 1, union, misses)

    def _trim(self) -> None:
        """Forget positions every lane has passed."""
        low = min(self._at.values(), default=self._base + len(self._keys))
        del self._keys[: low - self._base]
        self._base = low
