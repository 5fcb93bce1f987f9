"""Decodes run in lockstep, each on a loaded model of its own: a speculative run and the plain
run it is measured against take turns a pass at a time, so the disk's drift moves both sides
of a measured speed-up alike.

    from specdec.bench.lockstep import Side, lockstep, paired_runs
    plain, spec = lockstep([Side(sm_a, "none", DecodeConfig(1, 48)),
                            Side(sm_b, "oracle:0.9", DecodeConfig(4, 48))],
                           prompt, reference=tokens)
    for pair in paired_runs((sm_a, sm_b), prompt, [("oracle:0.9", 4), ("self", 3)], 48):
        pair.plain, pair.spec  # each run beside a plain run of its own

`specdec bench speedup` measures speed-ups and the break-even α this way on any machine
(specdec/bench/speedup.py); `python benchmarks/bench_cuda.py ... --lockstep spec` on a GPU. Runs one after the other, a minute apart, see a disk whose rate drifts ±20% over minutes
(the H100's and H200's virtual disks, docs/results/cuda.md): the same speculative run, measured
twice in one session against the plain runs either side of it, read 1.09x and 0.96x. In
lockstep each side's passes are interleaved with the other's at the granularity of a pass (a
fraction of a second where reads dominate), so what the disk does in a minute it does to both.

Each turn goes to the side with the fewest tokens committed, for one pass: no side is ever more
than one pass ahead of another. Among sides level, the one that went last goes first (the first
round in the sides' order), so a round of level sides runs in the reverse order of the one
before (A B, B A, A B, ...): no side always runs right after another, reading the blocks the
other has just read (the same tokens and routing). Each record says whether another side's pass
ran just before it (`PassRecord.follows`), so an analysis can tell the two apart (analysis.cuda
`auto_phases`). A pass's record times it alone (its clock runs from its start to its end,
decode/loop.py), and no side leaves work running past its pass's end, with one exception refused
here: plain greedy decoding where the cache holds every expert starts token t+1's forward before
it yields t, which would compute during the other side's turn. Every side runs the same prompt
and routing; the caches are each side's own, so a side's hits are what its own run earned. Each
side's decode keeps the heap alive at its start out of the collector's passes until it ends
(decode/loop.py `_heap_frozen`, which the first side to end undoes for all): with the fewest
going first, a side is asked past its last pass only once every side has committed its last
token (without a stop at EOS), so every pass is timed with the heap frozen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.clock.profiles import DeviceProfile
from specdec.core.errors import SpecdecError
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import DecodeConfig
from specdec.decode.records import PassRecord
from specdec.decode.run import (
    GenerationResult,
    eos_ids,
    generate,
    plain_greedy,
    result,
    routed,
    start,
)
from specdec.gamma.chooser import MAX_GAMMA
from specdec.stream.loader import StreamedModel, load
from specdec.trace.format import Trace


@dataclass(frozen=True)
class Side:
    sm: StreamedModel  # a model no other side decodes on (its cache is this side's)
    drafter: DrafterSpec | str
    cfg: DecodeConfig


def lockstep(
    sides: list[Side],
    prompt: list[int],
    profiles: tuple[DeviceProfile, ...] = (),
    routing: Trace | None = None,
    reference: list[int] | None = None,
    stop_at_eos: bool = False,
) -> list[GenerationResult]:
    """Each side's run, their passes interleaved (module doc); as `generate` would return them.
    `reference`: the plain greedy continuation a drafter needs (the oracle); None: a plain run
    on that side's model first, before any side starts."""
    models = [id(s.sm) for s in sides]
    if len(set(models)) < len(models):
        raise SpecdecError("lockstep: two sides share a loaded model: load one per side")
    for i, s in enumerate(sides):
        _refuse_full(s.sm, f"lockstep: side {i}'s budget")
    specs = [DrafterSpec.parse(s.drafter) if isinstance(s.drafter, str) else s.drafter
             for s in sides]  # fmt: skip
    with contextlib.ExitStack() as stack:
        runs = []
        for s, spec in zip(sides, specs, strict=True):
            stack.enter_context(routed(s.sm, routing, s.cfg.seed))
            eos = eos_ids(s.sm) if stop_at_eos else frozenset()
            runs.append(start(s.sm, prompt, spec, s.cfg, profiles, eos, reference))
        passes = [run.passes() for run in runs]
        records: list[list[PassRecord]] = [[] for _ in sides]
        live = list(range(len(sides)))
        last = [-1] * len(sides)  # the turn each side last took a pass in
        turn, prev = 0, None  # passes run so far; the side whose pass ran last
        while live:
            # the fewest committed; among them the one that went last (module doc)
            i = min(live, key=lambda j: (runs[j].n_generated, -last[j], j))
            rec = next(passes[i], None)
            if rec is None:
                live.remove(i)
                continue
            rec.follows = prev is not None and prev != i
            last[i], prev, turn = turn, i, turn + 1
            records[i].append(rec)
    return [
        result(s.sm, run, recs, spec, profiles, routing)
        for s, run, recs, spec in zip(sides, runs, records, specs, strict=True)
    ]


def _refuse_full(sm: StreamedModel, what: str) -> None:
    """Lockstep cannot time a model whose cache holds every expert apart (module doc)."""
    if sm.streamer.source.holds_all:
        raise SpecdecError(
            f"{what} holds every expert, where plain greedy decoding computes the next token "
            "during the other side's turn: give a smaller budget (`specdec bench overhead` "
            "measures full budget)"
        )


@contextlib.contextmanager
def two_models(
    path: str | Path, budget: str, **load_kw
) -> Iterator[tuple[StreamedModel, StreamedModel]]:
    """The model loaded twice at `budget` (one cache a side), closed after the block; a budget
    that holds every expert is refused before the second copy loads."""
    models: list[StreamedModel] = []
    try:
        models.append(load(path, budget=budget, **load_kw))
        _refuse_full(models[0], f"--budget {budget}")
        try:
            models.append(load(path, budget=budget, **load_kw))
        except SpecdecError as e:
            raise SpecdecError(f"the second copy (one cache a side): {e}") from None
        yield models[0], models[1]
    finally:
        for sm in models:
            sm.close()


@dataclass(frozen=True)
class Pair:
    k: int  # the pair's number, in the order of the runs asked for
    drafter: str
    gamma: int | str
    plain: GenerationResult
    spec: GenerationResult
    before: object  # what `before` returned on the speculative side's model (None: no `before`)


def paired_runs(
    models: tuple[StreamedModel, StreamedModel],
    prompt: list[int],
    runs: list[tuple[str, int | str]],
    tokens: int,
    profiles: tuple[DeviceProfile, ...] = (),
    routing: Trace | None = None,
    before: Callable[[StreamedModel], object] | None = None,
    reference: list[int] | None = None,
) -> Iterator[Pair]:
    """Each (drafter, γ) of `runs` in lockstep with a plain run of its own on the two models
    (loaded alike, at a budget that does not hold every expert), the plain side's model
    alternating pair to pair; both models warmed first at every γ (`warm_up`). `reference`:
    the plain greedy continuation the oracle drafts from, at least `tokens` long (None: an
    untimed plain run first, where a run needs one; `paired_reference` gives it). `before`:
    called on the speculative side's model before each pair (bench_cuda reads the disk's rate
    there); both caches are reset after it."""
    plain = DecodeConfig(1, tokens)
    reference = prepare(models, prompt, runs, tokens, routing, reference)
    for k, (drafter, gamma) in enumerate(runs):
        a, b = models if k % 2 == 0 else models[::-1]
        seen = before(b) if before else None
        for sm in models:
            sm.reset_cache()
        sides = [Side(a, "none", plain), Side(b, drafter, DecodeConfig(gamma, tokens))]
        done = lockstep(sides, prompt, profiles, routing, reference)
        yield Pair(k, drafter, gamma, *done, seen)


def prepare(
    models: tuple[StreamedModel, ...],
    prompt: list[int],
    runs: list[tuple[str, int | str]],
    tokens: int,
    routing: Trace | None,
    reference: list[int] | None = None,
) -> list[int] | None:
    """Before timed runs of `runs` on `models` (lockstep's two, or `--pairing between`'s one):
    each model warmed at what they use (`warm_up`), and the oracle's reference, `reference`
    where given, else made (`paired_reference`) where a run needs one (None where none does)."""
    for sm in models:
        warm_up(sm, prompt, runs, routing)
    if reference is None and needs_reference(runs):
        reference = paired_reference(models[0], prompt, tokens, routing)
    return reference


def paired_reference(
    sm: StreamedModel, prompt: list[int], tokens: int, routing: Trace | None
) -> list[int]:
    """The oracle's reference for `paired_runs`: `tokens` of plain greedy decoding
    (decode.run.plain_greedy, the cache reset after) under `routing`, untimed (a 512-token one
    took about 100 s at 9 GB on an H100, a third of an auto pair's time: bench_cuda keeps it for
    the session's later commands)."""
    with routed(sm, routing, DecodeConfig().seed):
        return plain_greedy(sm, prompt, tokens, stop_at_eos=False)


def needs_reference(runs: list[tuple[str, int | str]]) -> bool:
    """Whether a drafter of `runs` ((drafter, γ) pairs) drafts from a plain reference (the
    oracle)."""
    return any(DrafterSpec.parse(d).needs_reference for d, _ in runs)


def warm_up(sm: StreamedModel, prompt: list[int], runs: list[tuple], routing: Trace | None) -> None:
    """Untimed decodes at every γ the runs use (every γ `--gamma auto` may choose, where one is
    auto), accepting and rejecting, then a few passes of each other drafter they use (MTP's
    layer, a draft model, lookup's tables: their own first calls): the first call of a shape
    pays a one-off cost in the process (the seventh H200 session's first speculative run: 3.9 s
    in its first γ = 2 pass; 2.4 s of CPU in a first 9-position call), which a timed run must
    not carry. The cache is reset after."""
    auto = any(g == "auto" for d, g in runs if d != "none")
    fixed = {g for d, g in runs if d != "none" and g != "auto"}
    gammas = sorted(fixed | {2} | (set(range(2, MAX_GAMMA + 1)) if auto else set()))
    n = 2 * gammas[-1] + 2
    ref = generate(sm, prompt, "none", DecodeConfig(1, n), stop_at_eos=False, routing=routing)
    for g in gammas:  # α 0.5: accepted and rejected drafts
        generate(sm, prompt, "oracle:0.5", DecodeConfig(g, 2 * g + 2), stop_at_eos=False,
                 routing=routing, reference=ref.tokens)  # fmt: skip
    others = {d for d, _ in runs if d != "none" and not DrafterSpec.parse(d).needs_reference}
    for d in sorted(others):  # its widest fixed γ, else 2: the verify shapes are warm already
        g = max((g for e, g in runs if e == d and g != "auto"), default=2)
        generate(sm, prompt, d, DecodeConfig(g, 2 * g + 2), stop_at_eos=False, routing=routing)
    sm.reset_cache()
