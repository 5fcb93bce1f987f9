"""The chooser `--gamma auto` asks before each pass (γ as a setting: specdec.gamma.spec).

    chooser = GammaChooser(cost, n_layers=L, top_k=k, block_bytes=slot_bytes,
                           draft_block_bytes=mtp_slot_bytes)   # 0 without a draft layer
    choice = chooser.choose(context=120, left=40)   # Choice(gamma, why, candidates, sync)
    ... where choice.sync, the run's cache adopts plain's shadow first (cache.adopt(shadow)) ...
    ... run the pass at choice.gamma ...
    report = shadows.feed(committed_keys, chooser.alphas())   # specdec.gamma.shadows
    chooser.observe(Observed(gamma, accepted, union [L], misses [L], draft_union, draft_misses,
                             plain_misses=report.plain_misses, shadow=report.passes, context,
                             spent=(bytes_read, modeled_s),   # as the pass's record spent it
                             diverged=d, synced=same))  # re-sync: shadows.divergence(cache, plain)

The rule (docs/gamma-auto.md prints this text beside the measured check): for each candidate
γ = 1..max_gamma (1 is plain decoding),

- expected committed tokens E(γ) = 1 + Σ_{i<γ} Π_{j≤i} α_j, with α_j the live acceptance of the
  pass's j-th draft given the ones before it were accepted (its own counts over a prior of
  POOL drafts at the rate pooled over all positions; forgetting factor DECAY per judged draft,
  so it follows the text);
- expected reads per MoE layer, from counterfactual caches (specdec.gamma.shadows): one of the
  run's policy and size per candidate γ that fits a cache step, fed the committed tokens'
  routing in passes of γ positions, acceptance drawn from the live α, the positions past it
  routed as replay models rejected drafts (each of the previous position's experts kept with
  the text's measured next-token overlap, the rest a recent committed token's); and one fed
  them one position per forward (plain decoding, the reference). A γ's union and misses per
  pass are its shadow's, summed with weight FORGET per committed token (the same window
  for every γ and for plain, cold start included): measured on the cache that γ keeps, not on
  the one the run's other γ left. Before a shadow has a pass, γ is extrapolated from the widest
  one measured below it (U(γ) ∝ γ^b, b from the two widest measured, else the prior
  U(2) = (1 + GROWTH)·k), every new expert a miss, plus the misses it causes later (each
  expert past plain's k evicts one plain would have kept);
- the draft phase's reads (MTP's layer), draft by draft as the run's recent passes had them
  at that draft's place in the pass: the first draft (the catch-up after the pass before, whose
  verify evicted its experts) misses more than later ones, which reuse the drafts' before them
  (bundled MTP at 8%: 4.0, 1.1, 0.65 misses of 4); a place not drafted yet takes the widest
  one's; before any, k experts per draft, all missing;
- expected cost: modeled seconds of that pass (`cost(γ, context, union, misses, draft_union,
  draft_misses)`; the decode loop and replay give `PassClock.expected`, specdec.clock's device
  model: roofline per layer, router syncs, reads issued after the router; expected misses
  m + f costed as m and m + 1 whole reads weighted 1 − f and f, not rounded);
- admissible (the bytes rule): expected bytes per committed token at most (1 + RULE) times
  plain's; chosen: the most E(γ) per second among the admissible, ties to the smaller γ.

A hard floor, the guard: the chooser keeps the run's actual bytes and modeled seconds (what
each observed pass's record spent: a rollback's re-feed and a draft stop's unused forwards
included) and plain's shadow totals over the same committed tokens (its seconds summed token by
token, each a one-token pass with its own whole reads). A pass of γ > 1 runs only
while both still fit after it: actual + its expected bytes <= (1 + GUARD)·(plain's + E(γ)
tokens at plain's rate), and the same for seconds; and the same with only the pass's one
certain token credited (every draft rejected), as if the run ended right after it, and at what
that token surely costs plain: its compute, no reads (plain's mean rate overstated a token that
cost plain less: an adversary whose plain misses 0 or 2 experts a token, mean 1, reached
1.033x), its whole cost only where every access misses (below). No credit is taken for tokens
after the pass, whose plain rate is unknown (a cold start's is far above a warm cache's;
crediting it let one early rejected pass cost a 96-token run 6%, issue 24). Both also
reserve what the run may read beyond plain once it decodes plainly again: under LRU at most
the cache's size in whole reads, whatever follows (two LRU caches fed the same keys from any
states differ by at most their size in misses; `cache_blocks`; and no smaller reserve is a bound:
one key plain never read, then the old keys asked oldest first, costs the run exactly its size,
tests/gamma/test_gamma_auto.py), and none where the cache holds at most (L − 1)·k experts
(`lru_reserve`: every access misses there, plain's and the run's alike). The second check
prices the pass at its worst (every position's and every draft's non-resident experts
missing) against (1 + BOUND)·plain: so wherever the run ends (from FRONT tokens on where
every access misses, below) and whatever its passes read, it
stays within (1 + BOUND) of plain's bytes, by construction under LRU (other policies are not
bounded so), and in seconds as far as one read's seconds are a plain pass's marginal read
time. The price:
auto drafts only once BOUND of plain's totals covers a pass at its worst and the cache's size
in reads, so a short run, or one whose plain reads little against a large cache, stays
plain. Else γ = 1 ("guard"). RULE < GUARD < BOUND. A draft layer's reads (MTP's) are priced
wherever its blocks can leave the cache (specdec.gamma.controller), not only where they were
not resident when the run started.

Re-sync, where the cache is one plain LRU over every expert with a reserve to hold
(`can_resync`): the run can end its divergence from plain at any time by reading the blocks
plain's shadow holds that its own cache lacks and taking the shadow's order (ExpertCache.adopt:
LRU's order is its whole state); from then on it reads exactly what plain reads. So the reserve
is what re-syncing would read after the pass, not the cache's size: the divergence D now
(shadows.divergence, after each pass) plus one per block the pass reads at its worst (each
evicts at most one block plain holds), at most the cache's size; and the cache's size where the
pass's experts can outnumber the cache (its committed tokens' experts may then leave the run's
cache before it ends while plain's shadow takes them in). Plain passes are guarded too while the
run's cache is not plain's (the same worst room, a plain pass's misses each evicting one of
plain's blocks): where one would not fit, the run re-syncs first (Choice.sync; its reads are the
pass's), so the run's totals plus D stay within (1 + BOUND)·plain after every pass, and a
re-synced run reads what plain reads. The reserve's seconds are the larger of its reads at a
plain pass's marginal read and its reads as one re-sync batch (`resync_s`: the clock's
`resync_time`, latency and landing included). Other policies keep the cache's size in reserve.

Where every access misses (the reserve is none) plain's cost of every token ahead is known: k
reads per MoE layer, and seconds that grow with the context. There the bound is owed from a
stated length on, FRONT tokens or the run's own length if shorter (`front`; the tokens left
given to `choose` make the run's length): the worst check also credits BOUND of plain's cost
of each token between the pass and that length, since those tokens, were they plain, cost the
run what they cost plain. So a run that reaches min(FRONT, its length) is within
(1 + BOUND)·plain at that length and every later one, and may draft from its first pass; a run
cut before it (an end of sequence) may be above by up to BOUND of plain's cost of the tokens it
did not reach.

A chosen γ is held for a block of BLOCK passes (the guard checked every pass). The first block
is plain (warm-up). Acceptance is learnt only from passes that draft, so while plain is chosen
one pass ("explore") runs: each block until LEARN first drafts have been judged (the fastest
γ > 1), then every EXPLORE_EVERY blocks only a γ that would be admissible and faster than plain
were acceptance Z standard errors above its estimate. A block that is plain by the guard (the
best γ does not fit, and no admissible one that does drafts) explores only such a γ, in every
block while acceptance is unknown: a pass that could not become the choice would spend the
slack the best γ waits for. Exploration is paid from the guard's slack only: no slack, no
exploration.

The drafter's own routing, per drafter: γ is chosen here, before drafting, for every drafter
alike: the shadows price its verify reads on the recent text's routing (the draft phase's,
MTP's, come from the run's own passes). The self-draft's routers then route verify's very
positions (the first MoE layer exactly, deeper ones closely): under auto its draft runs one
position at a time up to this γ and stops early where the predicted misses of one more position
lower tokens per modeled second or push bytes per token past plain's (specdec.gamma.draft_stop,
the decode loop only). MTP's routing covers its own draft layer, none of verify's, so nothing
of it is predicted from. The rest (oracle, lookup, a draft model) route nothing of the target's.
Replay (specdec.gamma.replay) and the decode loop share this class.
Tests: `pytest tests/gamma/test_gamma_auto.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from specdec.cache.spec import PolicySpec
from specdec.core.errors import SpecdecError
from specdec.gamma.shadows import ShadowPass

MAX_GAMMA = 8  # auto's widest candidate
DECAY = 0.98  # acceptance: weight of the past per judged draft at that position
POOL = 2.0  # acceptance: judged drafts' worth of the pooled rate in each position's estimate
FORGET = 0.99  # shadows' reads: weight of the past per committed token (~100 tokens' memory)
EMA_DRAFT = 0.1  # the draft phase's reads, per draft place: weight of the newest pass there
GROWTH = 0.6  # prior union growth per extra position, in units of k (next-token overlap ~0.4)
GUARD = 0.02  # the run's bytes and seconds stay within (1 + GUARD)·plain's (target 1.03)
BOUND = 0.03  # ... and, were every pass at its worst, within (1 + BOUND)·plain's (the contract)
RULE = 0.01  # admissible: expected bytes per token within (1 + RULE)·plain's (below GUARD)
FRONT = 64  # tokens from which on the bound holds where plain's cost is known in advance
BLOCK = 8  # passes a chosen γ is held for
LEARN = 16  # judged first drafts below which every block may explore (acceptance unknown)
EXPLORE_EVERY = 8  # blocks between explorations once acceptance is known
Z = 2.0  # exploration's optimism: acceptance this many standard errors above its estimate


def lru_reserve(policy: PolicySpec, slots: int, n_layers: int, top_k: int) -> int:
    """The guard's reserve for one cache of `policy` and `slots` over every expert, read only
    as the router asks (no lookahead): what a run that drafted may still read beyond plain once
    it decodes plainly. Its size, except for a plain LRU (no speculation options) that holds at
    most (L − 1)·k experts: every forward visits each of the L MoE layers in turn with k distinct
    experts, so between two uses of a layer's expert come at least (L − 1)·k distinct keys of
    the other layers, as many as LRU keeps. Every access then misses, whatever the cache held
    (plain's reads and the run's are the same from any state): nothing to reserve."""
    return 0 if str(policy) == "lru" and slots <= (n_layers - 1) * top_k else slots


def can_resync(policy: PolicySpec, reserve: float) -> bool:
    """Whether a run whose guard holds `reserve` (`lru_reserve`'s, of one cache over every
    expert read only as the router asks) re-syncs its cache to plain's shadow instead: a plain
    LRU (no speculation options), whose order is its whole state, with a reserve to lower."""
    return str(policy) == "lru" and reserve > 0


def front_for(reserve: float) -> int:
    """`GammaChooser.front` for a guard that holds `reserve` (`lru_reserve`'s): FRONT where it
    holds none (every access misses, so plain's cost of every token ahead is known), else 0."""
    return FRONT if reserve == 0 else 0


@dataclass(frozen=True)
class Candidate:
    gamma: int
    tokens: float  # expected committed tokens
    cost_s: float  # expected modeled seconds of the pass
    bytes: float  # expected bytes read (verify + draft)
    measured: bool  # reads from this γ's shadow (else extrapolated)
    # the most the pass can read and take (every position's and every draft's experts missing)
    worst_bytes: float = 0.0
    worst_s: float = 0.0
    worst_reads: float = 0.0  # ... in blocks

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


class _Worst(NamedTuple):
    """A pass at its worst alone: what `GammaChooser._worst_room` and `_owed` read of a
    Candidate, where its expected cost is not needed (`GammaChooser._plain_fits`)."""

    gamma: int
    worst_bytes: float
    worst_s: float
    worst_reads: float


@dataclass(frozen=True)
class Choice:
    gamma: int
    # "best"; "bytes" (the fastest expected more bytes per token than the rule allows);
    # "guard" (the run's totals leave no room for the pass); "explore" (one pass to learn
    # acceptance); "warmup" (the first block); "hold" (a block's later pass: candidates in its
    # first's record); "last" (one token left)
    why: str
    candidates: tuple[Candidate, ...] = ()
    slack: tuple[float, float] | None = None  # the guard's room left: (bytes, seconds)
    # re-sync the run's cache to plain's shadow before the pass (GammaChooser.resync): the
    # bound no longer covers a plain pass from the cache as it is
    sync: bool = False

    def record(self) -> dict:
        """What the pass record keeps: the γ, why, and every candidate's expectations."""
        out: dict = {"gamma": self.gamma, "why": self.why}
        if self.sync:
            out["sync"] = True
        if self.candidates:
            out["candidates"] = [c.row() for c in self.candidates]
        if self.slack is not None:
            out["slack"] = {"bytes": round(self.slack[0]), "s": self.slack[1]}
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
    # [n, 2] each draft's (union, misses) in order (None: the totals spread evenly over γ − 1)
    drafts: np.ndarray | None = None
    # [n, L] misses plain decoding would have had at each committed token (its shadow)
    plain_misses: np.ndarray | None = None
    shadow: tuple[ShadowPass, ...] = ()  # lane passes the committed tokens completed
    context: int = 0  # positions before the pass (its cost)
    # (bytes, modeled seconds) the pass really spent, as its record counts them: a rollback's
    # re-feed and a draft stop's unused forwards included (None: the chooser's own cost of it)
    spent: tuple[float, float] | None = None
    # blocks of the main MoE layers not resident after the pass: the most a pass can miss
    # (None: not known, k per position and layer assumed missing)
    cold: int | None = None
    # with re-sync (GammaChooser.resync), after the pass: blocks plain's shadow holds that the
    # run's cache lacks, and whether the two are alike, keys and order (shadows.divergence)
    diverged: int | None = None
    synced: bool = False


# cost(γ, context, verify union [L], verify misses [L], draft union and misses per draft)
CostFn = Callable[[int, int, np.ndarray, np.ndarray, float, float], float]


@dataclass
class GammaChooser:
    cost: CostFn
    n_layers: int  # MoE layers the verify pass steps
    top_k: int
    block_bytes: np.ndarray | float  # [L] bytes of one expert per layer (or one for all)
    draft_block_bytes: float = 0.0  # one expert of the draft phase's layer (MTP; else 0)
    # the cache's slots: under LRU the most reads a run that drafted can still make beyond
    # plain's once it decodes plainly (two LRU caches fed the same keys from any states differ
    # by at most their size in misses): the guard's reserve from the first draft on, or with
    # re-sync its cap (`_reserve`)
    cache_blocks: float = 0.0
    # FRONT where plain decoding's cost is known in advance (every access misses: `lru_reserve`
    # none), else 0: the bound is kept at every length from min(front, the run's length) on
    # (module doc), so BOUND of those tokens' plain cost may be spent from the first pass
    front: int = 0
    max_gamma: int = MAX_GAMMA
    # the run can re-sync its cache to plain's shadow (an LRU over every expert: `can_resync`):
    # the reserve is then what re-syncing would read, not the cache's size (module doc)
    resync: bool = False
    # modeled seconds of re-syncing that many blocks at once (specdec.clock.passes.resync_time;
    # None: a plain pass's marginal read each)
    resync_s: Callable[[float], float] | None = None
    passes: int = 0
    _acc: np.ndarray = field(init=False)  # [G] accepted (decayed), index j = draft j
    _judged: np.ndarray = field(init=False)  # [G]
    # γ -> [2L + 1] its shadow's (union [L], misses [L], passes) summed, decayed per committed
    # token alike for every γ (plain, γ = 1: one pass per token), so all share one window
    _sums: dict[int, np.ndarray] = field(default_factory=dict)
    _draft: np.ndarray = field(init=False)  # [G - 1, 2] (union, misses) of the j-th draft
    _drafted: int = 0  # the most drafts a pass has had (places of _draft learnt)
    _plain_s: float = 0.0  # modeled seconds of one plain token (latest candidates)
    _spent: np.ndarray = field(init=False)  # [2] the run's (bytes, seconds) so far
    _plain_total: np.ndarray = field(init=False)  # [2] plain's over the same tokens
    _cold: float = float("inf")  # blocks not resident (Observed.cold): a pass's misses at most
    _tokens: int = 0  # committed tokens observed
    _horizon: int = 0  # min(front, the run's length): the first length the bound must hold at
    _miss_s: float = 0.0  # modeled seconds one more read adds to a plain pass (latest)
    _floor_s: float = 0.0  # modeled seconds of a plain token that reads nothing (latest)
    _since: int = 0  # blocks since the last exploration
    _diverged: float = 0.0  # re-sync: blocks plain's shadow holds that the run lacks (latest)
    _synced: bool = True  # re-sync: the run's cache is plain's shadow, keys and order
    _blocks: int = 0  # blocks started
    _pos: int = 0  # passes into the current block
    _length: int = 0  # passes of the current block (1: an exploration)
    _current: int = 1  # the current block's γ
    _held: Candidate | None = None  # ... as expected at the block's start
    # (γ, context) -> its Candidate, priced since the last observed pass (`_candidate`)
    _priced: dict[tuple[int, int], Candidate] = field(default_factory=dict)

    def __post_init__(self):
        if self.max_gamma < 1:
            raise SpecdecError(f"max gamma {self.max_gamma}: give at least 1")
        self._acc = np.zeros(self.max_gamma)
        self._judged = np.zeros(self.max_gamma)
        self._draft = np.zeros((self.max_gamma - 1, 2))
        self._spent, self._plain_total = np.zeros(2), np.zeros(2)
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

    def _hopeful_tokens(self, gamma: int) -> float:
        """E(γ) at acceptance Z standard errors above the estimate (few judged: wide)."""
        a = self.alphas()
        up = np.minimum(1.0, a + Z * np.sqrt(a * (1.0 - a) / (self._judged[1:] + POOL)))
        return 1.0 + float(np.cumprod(up[: gamma - 1]).sum())

    def _reads(self, gamma: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """([L] union, [L] misses, from its shadow) expected of a verify pass of γ positions."""
        k = np.full(self.n_layers, float(self.top_k))
        if gamma in self._sums:
            s, L = self._sums[gamma], self.n_layers
            return s[:L] / s[-1], s[L:-1] / s[-1], True
        if gamma == 1:  # plain, its shadow not fed yet: k experts, all missing
            return k, k.copy(), False
        base = max((g for g in self._sums if g < gamma), default=1)
        u0, m0, _ = self._reads(base)
        # [L] the union grows as γ^b (sublinear: later drafts reuse experts); the new experts
        # are each charged as a miss
        union = np.maximum(u0 * (gamma / base) ** self._exponent(), u0)
        return union, m0 + (union - u0), False

    def _exponent(self) -> np.ndarray:
        """[L] b of U(γ) ∝ γ^b: from the two widest γ measured, else the prior GROWTH."""
        seen = sorted(g for g in self._sums if g > 1)
        if len(seen) >= 2:
            g0, g1 = seen[-2], seen[-1]
            u0, u1 = self._reads(g0)[0], self._reads(g1)[0]
            ratio = np.maximum(u1, 1e-9) / np.maximum(u0, 1e-9)
            return np.clip(np.log(ratio) / np.log(g1 / g0), 0.0, 1.0)
        return np.full(self.n_layers, np.log2(1.0 + GROWTH))

    def _evictions(self, union: np.ndarray) -> np.ndarray:
        """[L] later misses a pass of `union` causes: each expert past plain's k evicts one that
        plain decoding would have kept, needed again with plain's hit probability per access
        (none in a layer where plain decoding never misses: there the cache evicts nothing).
        Charged only to a γ without a shadow: a shadow's passes pay their own."""
        u1, m1, _ = self._reads(1)
        hit = np.clip(1.0 - m1 / np.maximum(u1, 1e-9), 0.0, 1.0) * (m1 > 0)  # [L]
        return np.maximum(union - u1, 0.0) * hit

    def candidates(self, context: int, left: int) -> list[Candidate]:
        out = [self._candidate(g, context) for g in range(1, min(self.max_gamma, max(left, 1)) + 1)]
        self._plain_s = out[0].cost_s
        # one more read's seconds at the margin where a pass is most read-bound: every expert
        # missing, against one fewer per layer (a roofline's slope there is a whole read)
        k = np.full(self.n_layers, float(self.top_k))
        whole = self.cost(1, context, k, k, 0.0, 0.0)
        self._miss_s = max(whole - self.cost(1, context, k, k - 1.0, 0.0, 0.0), 0.0) / self.n_layers
        self._floor_s = self.cost(1, context, k, np.zeros(self.n_layers), 0.0, 0.0)
        return out

    def _candidate(self, g: int, context: int) -> Candidate:
        """A pass of γ = g as expected now, and at its worst: priced once per context between
        two observed passes (what it reads changes only in `observe`)."""
        if (g, context) in self._priced:
            return self._priced[g, context]
        union, misses, measured = self._reads(g)
        if not measured:
            misses = misses + self._evictions(union)
        d_union, d_miss = self._draft_reads(g)
        cost = self.cost(g, context, union, misses, d_union, d_miss)
        nbytes = float(misses @ self.block_bytes) + float(d_miss.sum()) * self.draft_block_bytes
        worst = self._worst(g, context)
        c = Candidate(g, self.expected_tokens(g), cost, nbytes, measured, *worst)
        self._priced[g, context] = c
        return c

    def _draft_reads(self, gamma: int) -> tuple[np.ndarray, np.ndarray]:
        """([γ − 1] union, [γ − 1] misses) expected of each draft of a pass of γ, in order: each
        place's own estimate where passes have drafted that far, the widest learnt past it; k
        each, all missing, before any pass drafted (only where there is a draft layer to read)."""
        n = gamma - 1
        if not self._drafted:
            k = float(self.top_k) if self.draft_block_bytes else 0.0
            return np.full(n, k), np.full(n, k)
        rows = self._draft[np.minimum(np.arange(n), self._drafted - 1)]  # [n, 2]
        return rows[:, 0], rows[:, 1]

    def _worst(self, gamma: int, context: int) -> tuple[float, float, float]:
        """(bytes, seconds, blocks) of a pass of γ whose every position's k experts per layer
        and every draft's k draft-layer experts miss (no more than the blocks not resident)."""
        k = float(self.top_k)
        u = np.full(self.n_layers, gamma * k)  # [L]
        drafts = (gamma - 1) * k if self.draft_block_bytes else 0.0
        # [L] no more misses than blocks not resident, and those the drafts' reads evict first
        # (a draft layer shares the cache: each read may evict a main layer's block)
        m = u * min(1.0, (self._cold + drafts) / u.sum())
        nbytes = float(m @ self.block_bytes) + drafts * self.draft_block_bytes
        per_draft = k if drafts else 0.0
        seconds = self.cost(gamma, context, u, m, per_draft, per_draft)
        return nbytes, seconds, float(m.sum()) + drafts

    def slack(self, c: Candidate) -> np.ndarray:
        """[2] the guard's room (bytes, seconds) after a pass of candidate `c`, the smaller of
        `room`'s two (negative: no room)."""
        return np.minimum(*self.room(c))

    def room(self, c: Candidate, reserve: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """([2] expected, [2] worst) room (bytes, seconds) after a pass of candidate `c`:
        (1 + GUARD) times plain's totals with the pass's E(γ) tokens at plain's per-token rate,
        less the run's spent, the pass's expected cost and the reserve (`_owed`: what the run
        may spend beyond plain afterwards); and (1 + BOUND) times plain's with its one certain
        token at what it surely costs plain, less the pass at its worst (every non-resident
        expert missing) and the reserve (the run may end right after it, or decode plainly to
        any length). No credit for tokens after the pass: plain's rate is not known."""
        per_token = self._per_token()
        owed = self._owed(c) if reserve else np.zeros(2)
        spent = self._spent + np.array([c.bytes, c.cost_s]) + owed
        expected = (1.0 + GUARD) * (self._plain_total + c.tokens * per_token) - spent
        return expected, self._worst_room(c, per_token, owed)

    def _per_token(self) -> np.ndarray:
        """[2] plain's (bytes, seconds) per token: its shadow's reads, its latest modeled pass."""
        return np.array([float(self._reads(1)[1] @ self.block_bytes), self._plain_s])

    def _worst_room(self, c: Candidate | _Worst, per_token: np.ndarray, owed: np.ndarray):
        """[2] `room`'s worst: what the bound leaves after a pass of `c` at its worst."""
        spent_worst = self._spent + np.array([c.worst_bytes, c.worst_s]) + owed
        # the tokens up to the horizon, were they plain, cost the run what they cost plain (every
        # access misses; seconds grow with the context), and the bound is owed only from there
        ahead = BOUND * per_token * max(0, self._horizon - self._tokens - 1)
        # the certain token: plain's whole cost where every access misses (known ahead: the
        # front, held only where `lru_reserve` is none), else its compute alone (plain may read
        # nothing for it, whatever its mean)
        certain = per_token if self.front else np.array([0.0, self._floor_s])
        return (1.0 + BOUND) * (self._plain_total + certain) + ahead - spent_worst

    def _owed(self, c: Candidate | _Worst) -> np.ndarray:
        """[2] (bytes, seconds) of the reserve after a pass of `c`: `_reserve`'s whole reads, in
        seconds each a plain pass's marginal read, or as one re-sync batch where that is dearer
        (latency and landing: what the run spends if it re-syncs instead)."""
        reads = self._reserve(c)
        seconds = reads * self._miss_s
        if self.resync and self.resync_s is not None:
            seconds = max(seconds, self.resync_s(reads))
        return np.array([reads * float(self.block_bytes.max()), seconds])

    def _reserve(self, c: Candidate | _Worst) -> float:
        """Whole reads the run may owe beyond plain after a pass of `c`: none where every expert
        of the main layers is resident and no draft layer shares the cache (a cache that holds
        them all never evicts); else the cache's size, or with
        re-sync what re-syncing could read after the pass at its worst (module doc): the
        divergence now and one more per block the pass reads (each evicts at most one block
        plain holds); none for a plain pass from a cache that is plain's (both read alike); the
        cache's size still where the pass's experts can outnumber the cache (`_outgrows`)."""
        if not self._evicts(self._cold):
            return 0.0
        if not self.resync:
            return self.cache_blocks
        if c.gamma == 1 and self._synced:
            return 0.0
        if self._outgrows(c):
            return self.cache_blocks
        return min(self.cache_blocks, self._diverged + c.worst_reads)

    def _evicts(self, cold: float) -> bool:
        """Whether the cache can still evict a block plain holds: a main block not resident
        (`cold` of them), or a draft layer sharing the cache (each draft read may evict one)."""
        return cold > 0 or bool(self.draft_block_bytes)

    def tracks_divergence(self, cold: int) -> bool:
        """Whether the run's divergence from plain's cache is owed after a pass that left `cold`
        main blocks not resident (re-sync, and a cache that can still evict): the decode loop and
        replay measure it (shadows.divergence) only then."""
        return self.resync and self._evicts(cold)

    def _outgrows(self, c: Candidate | _Worst) -> bool:
        """Whether a pass of `c` can select more experts than the cache holds: its committed
        tokens' experts may then leave the run's cache before it ends while plain's shadow takes
        them in, each widening the divergence beyond one per read (rare: its worst reads alone
        then reach most of the cache's size)."""
        k, drafts = self.top_k, bool(self.draft_block_bytes)
        span = c.gamma * k * self.n_layers + (c.gamma - 1) * k * drafts
        return span > self.cache_blocks

    def _affordable(self, c: Candidate) -> bool:
        if c.gamma == 1:
            return True
        return 1 in self._sums and bool((self.slack(c) >= 0).all())

    def choose(self, context: int = 0, left: int = 1 << 30, ends: bool = False) -> Choice:
        """The γ of the next pass (at most `left`, the tokens still to commit), and whether the
        run re-syncs its cache to plain's shadow first (`resync`: a plain pass from the cache
        as it is no longer fits the bound). `ends`: the run ends after those `left` tokens (not
        a prompt boundary that more follow): its last pass owes no reserve, so it re-syncs only
        where the pass itself would not fit (a re-sync there reads blocks nothing uses)."""
        choice = self._choose(context, left)
        if choice.gamma > 1 or not self.resync or self._synced:
            return choice
        if self._plain_fits(context, reserve=not (ends and left <= 1)):
            return choice
        return replace(choice, sync=True)

    def _choose(self, context: int, left: int) -> Choice:
        if left <= 1 or self.max_gamma == 1:
            return Choice(1, "last" if left <= 1 else "best")
        self._horizon = min(self.front, self._tokens + left)
        self._pos += 1
        if self._pos < self._length:  # a block's later pass: its γ while the guard allows
            if self._current > 1 and not self._affordable(self._held):
                self._current = 1  # the rest of the block is plain
                return Choice(1, "guard")
            return Choice(min(self._current, left), "hold")
        cands = tuple(self.candidates(context, left))
        self._pos, self._blocks = 0, self._blocks + 1
        g, why = (1, "warmup") if self._blocks == 1 else self._pick(cands)
        self._current, self._held = g, cands[g - 1]
        self._length = 1 if why == "explore" else BLOCK
        room = tuple(self.slack(self._held).tolist()) if 1 in self._sums else None
        return Choice(g, why, cands, room)

    def _plain_fits(self, context: int, reserve: bool = True) -> bool:
        """Whether a plain pass from the run's cache as it is (diverged from plain's) keeps the
        bound: its worst room, with what re-syncing could read after it in reserve (unless the
        run ends with it)."""
        if 1 not in self._sums:  # nothing observed yet: the run is still plain's
            return True
        # only the worst room is read: a plain pass's expected cost is not priced for it (a
        # block's first pass has it already, priced with its candidates)
        c = self._priced.get((1, context)) or _Worst(1, *self._worst(1, context))
        owed = self._owed(c) if reserve else np.zeros(2)
        return bool((self._worst_room(c, self._per_token(), owed) >= 0).all())

    def _pick(self, cands: tuple[Candidate, ...]) -> tuple[int, str]:
        """A block's γ: the best admissible, an exploration, or plain (module doc)."""
        per_token = cands[0].bytes / cands[0].tokens
        allowed = [c for c in cands if c.bytes / c.tokens <= per_token * (1 + RULE)]
        best = max(allowed, key=lambda c: (c.rate, -c.gamma))
        fastest = max(cands, key=lambda c: (c.rate, -c.gamma))
        self._since += 1
        # the guard prices a pass at its worst, which grows with γ: where the best γ does not
        # fit, a smaller one may (the widest that fits is what the run can afford yet)
        affordable = [c for c in cands if self._affordable(c)]
        guarded = best not in affordable
        if guarded:
            best = max((c for c in allowed if c in affordable), key=lambda c: (c.rate, -c.gamma))
        # acceptance is learnt only by drafting: a block plain by the bytes rule explores the
        # fastest γ that fits while it is unknown; one plain by the guard, only a γ that fits and
        # would be chosen were acceptance as high as it plausibly is (else its pass spends the
        # slack the best γ waits for)
        learning = self._judged[1] < LEARN
        if best.gamma == 1 and learning and not guarded:
            probe = max(affordable[1:], key=lambda c: (c.rate, -c.gamma), default=None)
        elif best.gamma == 1 and (learning or self._since >= EXPLORE_EVERY):
            probe = self._hopeful(affordable, best.rate, per_token)
        else:
            probe = None
        if probe is not None:
            self._since = 0
            return probe.gamma, "explore"
        if guarded and best.gamma == 1:
            return 1, "guard"
        return best.gamma, "best" if best is fastest else "bytes"

    def _hopeful(self, cands, rate: float, per_token: float) -> Candidate | None:
        """The γ > 1 that would be admissible and fastest, beating `rate`, were acceptance as
        high as it plausibly is (None: no γ worth a pass to learn it)."""
        out, top = None, rate
        for c in cands[1:]:
            tokens = self._hopeful_tokens(c.gamma)
            if c.bytes / tokens <= per_token * (1 + RULE) and tokens / c.cost_s > top:
                out, top = c, tokens / c.cost_s
        return out

    def observe(self, o: Observed) -> None:
        """Learn from a finished pass: acceptance per draft position, the run's and plain's
        totals (the guard), the shadows' passes, the draft phase's reads."""
        self._priced.clear()
        self.passes += 1
        judged = min(o.accepted + 1, o.gamma - 1)  # drafts after a rejection are never judged
        for j in range(1, judged + 1):
            self._acc[j] = DECAY * self._acc[j] + (j <= o.accepted)
            self._judged[j] = DECAY * self._judged[j] + 1.0
        u, m = np.asarray(o.union, np.float64), np.asarray(o.misses, np.float64)
        if o.cold is not None:
            self._cold = float(o.cold)
        if o.diverged is not None:
            self._diverged, self._synced = float(o.diverged), o.synced
        if o.spent is not None:
            self._spent += o.spent
        else:
            drafts = max(o.gamma - 1, 1)
            spent_s = self.cost(
                o.gamma, o.context, u, m, o.draft_union / drafts, o.draft_misses / drafts
            )
            spent_b = float(m @ self.block_bytes) + o.draft_misses * self.draft_block_bytes
            self._spent += (spent_b, spent_s)
        tokens = o.accepted + 1
        self._tokens += tokens
        for sums in self._sums.values():
            sums *= FORGET**tokens
        if o.plain_misses is not None:
            # plain's seconds: each token its own pass with its whole reads (costing the mean
            # over a pass's tokens rounded 0.5 read to none, crediting plain too little)
            per = np.asarray(o.plain_misses, np.float64).reshape(-1, self.n_layers)  # [n, L]
            k = np.full(self.n_layers, float(self.top_k))
            plain_s = sum(self.cost(1, o.context + i, k, m, 0.0, 0.0) for i, m in enumerate(per))
            total = per.sum(0)  # [L]
            self._plain_total += (float(total @ self.block_bytes), plain_s)
            self._add(1, k * len(per), total, len(per))
        for p in o.shadow:
            self._add(p.gamma, p.union, p.misses, 1)
        if o.gamma > 1:
            n = o.gamma - 1
            each = np.array([o.draft_union, o.draft_misses]) / n
            drafts = np.broadcast_to(each, (n, 2)) if o.drafts is None else np.asarray(o.drafts)
            for j, row in enumerate(drafts[: self.max_gamma - 1]):  # [2] the j-th draft's
                if j < self._drafted:
                    self._draft[j] += EMA_DRAFT * (row - self._draft[j])
                else:
                    self._draft[j] = row
            self._drafted = max(self._drafted, min(len(drafts), self.max_gamma - 1))

    def _add(self, gamma: int, union: np.ndarray, misses: np.ndarray, passes: int) -> None:
        row = np.concatenate([union, misses, [passes]])  # [2L + 1]
        if gamma in self._sums:
            self._sums[gamma] += row
        else:
            self._sums[gamma] = row.astype(np.float64)
