"""γ per verify pass: a fixed number or `auto`, and the chooser `auto` asks before each pass.

    gamma = parse_gamma("auto")            # at the edge (CLI, Hydra); an int passes through
    chooser = GammaChooser(cost, n_layers=L, top_k=k, block_bytes=slot_bytes)
    choice = chooser.choose(context=120, left=40)   # Choice(gamma, why, candidates)
    ... run the pass at choice.gamma ...
    chooser.observe(Observed(gamma, accepted, union [L], misses [L], draft_union, draft_misses))

The rule (docs/gamma-auto.md prints this text beside the measured check): for each candidate
γ = 1..max_gamma (1 is plain decoding),

- expected committed tokens E(γ) = 1 + Σ_{i<γ} Π_{j≤i} α_j, with α_j the live acceptance of the
  pass's j-th draft given the ones before it were accepted (its own counts over a prior of
  POOL drafts at the rate pooled over all positions; forgetting factor DECAY per judged draft,
  so it follows the text);
- expected reads, per MoE layer: the verify union and misses the recent passes of that γ had
  (exponential average, weight EMA); a γ not measured is extrapolated from the widest one
  measured below it by the recent union growth, U(γ) ∝ γ^b with b from the two widest γ
  measured (else the prior U(2) = (1 + GROWTH)·k), every new expert charged as a miss until
  measured (pessimistic on purpose: a wider pass evicts more); the draft phase's reads per
  draft as its recent passes had them (MTP);
- expected cost: modeled seconds of that pass (`cost(γ, context, union, misses, draft_union,
  draft_misses)`; the decode loop and replay give `PassClock.expected`, specdec.clock's device
  model: roofline per layer, router syncs, reads issued after the router);
- plus the misses a pass causes later: each expert past plain's k evicts one that plain
  decoding would have kept, needed again with plain's hit probability (a block measures its own misses,
  not the ones it leaves to the passes after it; seen: γ = 8 over a 32-slot cache flushed it,
  and the plain passes after it paid);
- chosen: the γ with the most E(γ) per second among those whose expected bytes per committed
  token do not exceed plain decoding's (γ = 1), ties to the smaller γ.

A chosen γ is held for a block of BLOCK passes, and a block's reads are measured only from its
SETTLE-th pass on: what a pass misses depends on what the passes before it left in the cache, so
the estimate of a γ is of the cache that γ keeps, not of the one another γ left. The first block
is plain (warm-up). Exploration keeps the estimates live at a bounded price: a neighbour of the
best (γ ± 1) never measured is probed by one pass (its acceptance, union growth and misses,
its new experts taken to miss at least as often as plain's do; a block follows only if that
makes it the best), a measured one
expected within NEAR of the best's rate and NEAR_BYTES of plain's bytes per token (and plain
itself, the reference of the bytes rule) is run for a block every EXPLORE_EVERY blocks.

Plain decoding's reads, the bytes rule's reference, are best not measured by running plain
passes: a few plain passes after a run of wide passes see the cache the wide ones left, not
plain's own. Where the caller feeds `Observed.plain_misses` (replay and the decode loop do: a
shadow cache of the same policy and size, fed the committed tokens' routing one position per
forward, specdec.cache.adaptive.shadow_plain), γ = 1's expected misses are those, per token.

Not used: the drafter's own routing of its drafts (the self-draft's routers, MTP's layer). γ is
chosen before drafting, and those choices exist only once the drafts have run, which is the
cost being decided; MTP's covers its own layer only. Every drafter is predicted from the recent
union growth. Replay (specdec.cache.adaptive) and the decode loop share this class.
Tests: `pytest tests/test_gamma_auto.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specdec.errors import SpecdecError

AUTO = "auto"
Gamma = int | Literal["auto"]
MAX_GAMMA = 8  # auto's widest candidate
DECAY = 0.98  # acceptance: weight of the past per judged draft at that position
POOL = 2.0  # acceptance: judged drafts' worth of the pooled rate in each position's estimate
EMA = 0.1  # reads: weight of the newest pass of a γ
EMA_PLAIN = 0.05  # plain's shadow misses: weight of the newest pass (noisy per pass, every pass)
GROWTH = 0.6  # prior union growth per extra position, in units of k (next-token overlap ~0.4)
BLOCK = 8  # passes a chosen γ is held for (the cache settles to it)
SETTLE = 2  # passes into a block before its reads are measured
EXPLORE_EVERY = 8  # blocks between explorations of a measured neighbour
EXPLORE_NEW = 1  # blocks between probes of a neighbour never measured
NEAR = 0.9  # a measured neighbour is explored only if expected within 10% of the best's rate
NEAR_BYTES = 0.05  # ... and within 5% of plain's bytes per token


def parse_gamma(value: str | int) -> Gamma:
    """γ from the command line or a config: a positive integer or `auto`."""
    text = str(value).strip()
    if text.lower() == AUTO:
        return AUTO
    try:
        g = int(text)
    except ValueError:
        raise SpecdecError(
            f"gamma {value!r}: give a whole number >= 1 (1 is plain decoding) or auto"
        ) from None
    if g < 1:
        raise SpecdecError(f"gamma must be >= 1 (got {g}); gamma = 1 is plain decoding")
    return g


@dataclass(frozen=True)
class Candidate:
    gamma: int
    tokens: float  # expected committed tokens
    cost_s: float  # expected modeled seconds of the pass
    bytes: float  # expected bytes read (verify + draft)
    measured: bool  # reads of this γ measured lately (else extrapolated)

    @property
    def rate(self) -> float:
        return self.tokens / self.cost_s

    def row(self) -> dict:
        return {
            "gamma": self.gamma,
            "tokens": round(self.tokens, 4),
            "cost_s": self.cost_s,
            "bytes": round(self.bytes),
            "measured": self.measured,
        }


@dataclass(frozen=True)
class Choice:
    gamma: int
    # "best"; "bytes" (the fastest expected more bytes per token than plain); "explore";
    # "probe" (one pass of an unmeasured neighbour);
    # "warmup" (the first block); "hold" (a block's later pass: candidates in its first's
    # record); "last" (one token left)
    why: str
    candidates: tuple[Candidate, ...] = ()

    def record(self) -> dict:
        """What the pass record keeps: the γ, why, and every candidate's expectations."""
        out = {"gamma": self.gamma, "why": self.why}
        if self.candidates:
            out["candidates"] = [c.row() for c in self.candidates]
        return out


@dataclass(frozen=True)
class Observed:
    """One pass, as the chooser learns from it."""

    gamma: int  # positions verified
    accepted: int  # drafts accepted (the pass judged accepted + 1 drafts unless all passed)
    union: np.ndarray  # [L] verify union per MoE layer
    misses: np.ndarray  # [L] verify misses per MoE layer
    draft_union: float = 0.0  # draft phase, summed over layers
    draft_misses: float = 0.0
    # [L] misses plain decoding would have had on the pass's committed tokens: a shadow cache
    # of the same policy and size fed one committed position per forward (shadow_plain)
    plain_misses: np.ndarray | None = None


# cost(γ, context, verify union [L], verify misses [L], draft union and misses per draft)
CostFn = Callable[[int, int, np.ndarray, np.ndarray, float, float], float]


@dataclass
class GammaChooser:
    cost: CostFn
    n_layers: int  # MoE layers the verify pass steps
    top_k: int
    block_bytes: np.ndarray | float  # [L] bytes of one expert per layer (or one for all)
    draft_block_bytes: float = 0.0  # one expert of the draft phase's layer (MTP)
    max_gamma: int = MAX_GAMMA
    passes: int = 0
    _acc: np.ndarray = field(init=False)  # [G] accepted (decayed), index j = draft j
    _judged: np.ndarray = field(init=False)  # [G]
    _union: dict[int, np.ndarray] = field(default_factory=dict)  # γ -> [L]
    _misses: dict[int, np.ndarray] = field(default_factory=dict)  # γ -> [L]
    _draft: np.ndarray = field(init=False)  # [2] draft (union, misses) per draft
    _drafts_seen: bool = False
    _plain: np.ndarray | None = None  # [L] plain decoding's misses per token (shadow cache)
    _explored: int = 0  # exploration blocks so far
    _since: int = 0  # blocks since the last exploration
    _blocks: int = 0  # blocks started
    _pos: int = 0  # passes into the current block
    _length: int = 0  # passes of the current block (1: a probe)
    _current: int = 1  # the current block's γ

    def __post_init__(self):
        if self.max_gamma < 1:
            raise SpecdecError(f"max gamma {self.max_gamma}: give at least 1")
        self._acc = np.zeros(self.max_gamma)
        self._judged = np.zeros(self.max_gamma)
        self._draft = np.zeros(2)
        self.block_bytes = np.broadcast_to(
            np.asarray(self.block_bytes, np.float64), (self.n_layers,)
        )

    def alphas(self) -> np.ndarray:
        """[G - 1] live acceptance of draft 1..G-1 given the drafts before it were accepted:
        each position's own counts over a prior of POOL judged drafts at the pooled rate of all
        positions (itself over Beta(1, 1)), so a position rarely drafted takes the others' rate."""
        pooled = (self._acc[1:].sum() + 1.0) / (self._judged[1:].sum() + 2.0)
        return (self._acc[1:] + POOL * pooled) / (self._judged[1:] + POOL)

    def expected_tokens(self, gamma: int) -> float:
        return 1.0 + float(np.cumprod(self.alphas()[: gamma - 1]).sum())

    def _reads(self, gamma: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """([L] union, [L] misses, measured) expected of a verify pass of γ positions."""
        if gamma == 1 and self._plain is not None:
            return np.full(self.n_layers, float(self.top_k)), self._plain, True
        if gamma in self._union:
            return self._union[gamma], self._misses[gamma], True
        below = [g for g in self._union if g < gamma]
        if not below:  # nothing measured: one position of k experts, all missing
            u = np.full(self.n_layers, float(self.top_k))
            base, u0, m0 = 1, u, u.copy()
        else:
            base = max(below)
            u0, m0 = self._union[base], self._misses[base]
        # [L] the union grows as γ^b (sublinear: later drafts reuse experts); the new experts
        # are each charged as a miss
        union = np.maximum(u0 * (gamma / base) ** self._exponent(), u0)
        return union, m0 + (union - u0), False

    def _exponent(self) -> np.ndarray:
        """[L] b of U(γ) ∝ γ^b: from the two widest γ measured, else the prior GROWTH."""
        seen = sorted(self._union)
        if len(seen) >= 2:
            g0, g1 = seen[-2], seen[-1]
            ratio = np.maximum(self._union[g1], 1e-9) / np.maximum(self._union[g0], 1e-9)
            return np.clip(np.log(ratio) / np.log(g1 / g0), 0.0, 1.0)
        return np.full(self.n_layers, np.log2(1.0 + GROWTH))

    def _evictions(self, union: np.ndarray) -> np.ndarray:
        """[L] later misses a pass of `union` causes: each expert past plain's k evicts one that
        plain decoding would have kept, needed again with plain's hit probability per access
        (none in a layer where plain decoding never misses: there the cache evicts nothing)."""
        u1, m1, _ = self._reads(1)
        hit = np.clip(1.0 - m1 / np.maximum(u1, 1e-9), 0.0, 1.0) * (m1 > 0)  # [L]
        return np.maximum(union - u1, 0.0) * hit

    def candidates(self, context: int, left: int) -> list[Candidate]:
        out = []
        d_union, d_miss = self._draft if self._drafts_seen else (0.0, 0.0)
        for g in range(1, min(self.max_gamma, max(left, 1)) + 1):
            union, misses, measured = self._reads(g)
            misses = misses + self._evictions(union)
            cost = self.cost(g, context, union, misses, d_union, d_miss)
            nbytes = float(misses @ self.block_bytes) + (g - 1) * d_miss * self.draft_block_bytes
            out.append(Candidate(g, self.expected_tokens(g), cost, nbytes, measured))
        return out

    def choose(self, context: int = 0, left: int = 1 << 30) -> Choice:
        """The γ of the next pass (at most `left`, the tokens still to commit)."""
        if left <= 1 or self.max_gamma == 1:
            return Choice(1, "last" if left <= 1 else "best")
        self._pos += 1
        if self._pos < self._length:  # hold the block's γ (its first pass's record says why)
            return Choice(min(self._current, left, self.max_gamma), "hold")
        cands = tuple(self.candidates(context, left))
        self._pos, self._blocks = 0, self._blocks + 1
        if self._blocks == 1:
            self._current, why = 1, "warmup"
        else:
            self._current, why = self._pick(cands)
        self._length = 1 if why == "probe" else BLOCK
        return Choice(self._current, why, cands)

    def _pick(self, cands: tuple[Candidate, ...]) -> tuple[int, str]:
        """A block's γ: the best allowed, or a neighbour worth measuring (see module doc)."""
        plain = cands[0]
        per_token = plain.bytes / plain.tokens
        allowed = [c for c in cands if c.bytes / c.tokens <= per_token * (1 + 1e-9)]
        best = max(allowed, key=lambda c: (c.rate, -c.gamma))
        fastest = max(cands, key=lambda c: (c.rate, -c.gamma))
        self._since += 1
        beside = [c for c in cands if abs(c.gamma - best.gamma) == 1]
        fresh = [c for c in beside if not c.measured]
        if fresh and self._since >= EXPLORE_NEW:
            self._since = 0
            return fresh[0].gamma, "probe"
        near = [
            c
            for c in beside
            if (c.gamma == 1 and self._plain is None)  # the bytes rule's reference: kept fresh
            or (c.rate >= NEAR * best.rate and c.bytes / c.tokens <= per_token * (1 + NEAR_BYTES))
        ]
        if near and self._since >= EXPLORE_EVERY:
            self._since = 0
            self._explored += 1
            return near[self._explored % len(near)].gamma, "explore"
        return best.gamma, "best" if best is fastest else "bytes"

    def observe(self, o: Observed) -> None:
        """Learn from a finished pass: acceptance per draft position, and the reads of its γ
        once the block has settled (the first SETTLE passes of a new γ see the cache the last
        γ left)."""
        self.passes += 1
        judged = min(o.accepted + 1, o.gamma - 1)  # drafts after a rejection are never judged
        for j in range(1, judged + 1):
            self._acc[j] = DECAY * self._acc[j] + (j <= o.accepted)
            self._judged[j] = DECAY * self._judged[j] + 1.0
        if o.plain_misses is not None:
            per = np.asarray(o.plain_misses, np.float64) / (o.accepted + 1)  # [L] per token
            self._plain = (
                per if self._plain is None else self._plain + EMA_PLAIN * (per - self._plain)
            )
        if self._pos < SETTLE and self._length > 1:
            return
        u, m = np.asarray(o.union, np.float64), np.asarray(o.misses, np.float64)
        if (
            self._length == 1
            and o.gamma not in self._union
            and (1 in self._union or self._plain is not None)
        ):
            # a probe's one pass is a noisy sample: its new experts are taken to miss at least
            # as often as plain decoding's experts do (a lucky pass must not look cheaper)
            u1, m1, _ = self._reads(1)
            m = np.maximum(m, m1 + (u - u1) * np.clip(m1 / np.maximum(u1, 1e-9), 0.0, 1.0))
        if o.gamma in self._union:
            self._union[o.gamma] += EMA * (u - self._union[o.gamma])
            self._misses[o.gamma] += EMA * (m - self._misses[o.gamma])
        else:
            self._union[o.gamma], self._misses[o.gamma] = u.copy(), m.copy()
        if o.gamma > 1:
            per = np.array([o.draft_union, o.draft_misses]) / (o.gamma - 1)
            if self._drafts_seen:
                self._draft += EMA * (per - self._draft)
            else:
                self._draft, self._drafts_seen = per, True
