"""One generation run from a `DrafterSpec`: decode, write records, summarise.

Used by `specdec generate` and the experiments; the oracle drafter gets its reference (the plain
greedy continuation) from a plain run on a fresh cache, and the cache is reset after it so the
measured run starts cold like any other.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.clock.profiles import DeviceProfile
from specdec.core.errors import SpecdecError
from specdec.core.progress import progress
from specdec.decode.drafters import Drafter, DrafterSpec
from specdec.decode.loop import Decode, DecodeConfig
from specdec.decode.records import PassRecord, RecordWriter, summarize
from specdec.decode.routing import RoutingRecorder
from specdec.decode.trace_routing import TraceRouting
from specdec.store.budget import peak_rss_bytes
from specdec.stream.loader import StreamedModel
from specdec.trace.format import Trace


@dataclass
class GenerationResult:
    tokens: list[int]
    text: str
    records: list[PassRecord]
    summary: dict
    prefill_s: float


def eos_ids(sm: StreamedModel) -> frozenset[int]:
    ids = getattr(sm.tokenizer, "eos_token_ids", None) or []
    return frozenset(int(i) for i in ids)


def check_context(sm: StreamedModel, n_prompt: int, max_tokens: int) -> None:
    """A prompt longer than the model's context is an error; one that leaves too little room for
    max_tokens gets a warning (the model decodes past what it was trained on)."""
    cfg = sm.config.get("text_config", sm.config)
    ctx = cfg.get("max_position_embeddings")
    if not isinstance(ctx, int) or ctx <= 0:
        return
    if n_prompt >= ctx:
        raise SpecdecError(
            f"the prompt is {n_prompt} tokens, the model's context is {ctx} "
            "(max_position_embeddings): shorten the prompt"
        )
    if n_prompt + max_tokens > ctx:
        print(
            f"specdec: warning: prompt ({n_prompt} tokens) + max tokens ({max_tokens}) exceed the "
            f"model's context of {ctx}: tokens past it come from positions it was not trained on",
            file=sys.stderr,
            flush=True,
        )


def plain_greedy(
    sm: StreamedModel, prompt: list[int], max_tokens: int, stop_at_eos: bool = True
) -> list[int]:
    """The plain greedy continuation (γ = 1); the cache is reset afterwards."""
    run = Decode(
        sm,
        prompt,
        Drafter(),
        DecodeConfig(1, max_tokens),
        (),
        eos_ids(sm) if stop_at_eos else frozenset(),
    )
    # the oracle's reference: a whole plain decode before the measured one starts
    for _ in progress(run.passes(), total=max_tokens - 1, desc="reference (plain)", unit="tok"):
        pass
    sm.reset_cache()
    return list(run.generated)


def first_departure(got: list[int], want: list[int]) -> int | None:
    """The first position where `got` parts from `want` (the shorter one's length where one is
    a prefix of the other); None where they are equal token for token (the lossless contract)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    return min(len(got), len(want)) if at is None and len(got) != len(want) else at


def generate(
    sm: StreamedModel,
    prompt: list[int],
    drafter: DrafterSpec | str = "none",
    cfg: DecodeConfig | None = None,
    profiles: tuple[DeviceProfile, ...] = (),
    records_path: Path | None = None,
    stop_at_eos: bool = True,
    on_pass: Callable[[PassRecord], None] | None = None,
    append: bool = False,
    routing: Trace | None = None,
    reference: list[int] | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> GenerationResult:
    """Decode `prompt` with `drafter`; `on_pass` sees each record once it is written (progress),
    `on_tokens` each pass's newly committed tokens (the prefill's first one with the first pass's:
    streamed text).

    `drafter` is the spec parsed at the edge; a string (`oracle:0.9`, for scripts and tests) is
    parsed here, once.
    An existing records file is refused unless `append`.
    routing: a trace whose experts every MoE layer uses instead of the router's
    (specdec.decode.trace_routing), for the reference run too; None: the router's own.
    reference: the plain greedy continuation a drafter needs (the oracle), when the caller has
    it already (a sweep runs it once); None: a plain run first.
    """
    with routed(sm, routing, (cfg or DecodeConfig()).seed):
        return _generate(sm, prompt, drafter, cfg, profiles, records_path, stop_at_eos,
                         on_pass, append, routing, reference, on_tokens)  # fmt: skip


@contextlib.contextmanager
def routed(sm: StreamedModel, routing: Trace | None, seed: int) -> Iterator[None]:
    """Inside the block every MoE layer of `sm` takes `routing`'s experts instead of its
    router's (specdec.decode.trace_routing); None: the router's own."""
    streamer = sm.streamer
    streamer.route_override = TraceRouting.for_model(routing, sm, seed) if routing else None
    try:
        yield
    finally:
        streamer.route_override = None


def start(sm: StreamedModel, prompt: list[int], spec: DrafterSpec, cfg: DecodeConfig,
          profiles: tuple[DeviceProfile, ...], eos: frozenset[int],
          reference: list[int] | None) -> Decode:  # fmt: skip
    """The run's Decode, not started: the drafter built (the oracle's reference a plain run
    first where not given)."""
    check_context(sm, len(prompt), cfg.max_tokens)
    if spec.needs_reference and reference is None:
        # stopping at EOS where the run does (no EOS ids: nothing to stop at either way)
        reference = plain_greedy(sm, prompt, cfg.max_tokens, bool(eos))
    return Decode(sm, prompt, spec.build(sm, reference, cfg.seed), cfg, profiles, eos)


def result(sm: StreamedModel, run: Decode, records: list[PassRecord], spec: DrafterSpec,
           profiles: tuple[DeviceProfile, ...], routing: Trace | None) -> GenerationResult:  # fmt: skip
    """A finished run's tokens, text, records and summary (what `specdec generate` prints)."""
    summary = summarize(records, [p.name for p in profiles])
    summary["drafter"] = str(spec)
    # which model ran, whatever its name: a path of the same name is not the bundled model
    summary["model_path"] = str(sm.source or sm.path)
    summary["model_hash"] = sm.model_hash
    summary["prefill_s"] = run.prefill_s
    summary.update(sm.plan.stats())
    summary["peak_rss_bytes"] = peak_rss_bytes()  # prefill and load included
    # measured, not asked for: under memory pressure the kernel grants fewer 2 MiB pages
    summary["arena_huge_pages"] = sm.streamer.arena.huge_page_fraction
    # and the reader's staging, where blocks are staged (`--io pinned`: every block)
    summary["staging_huge_pages"] = sm.streamer.reader.staging_huge_pages
    summary["io"] = sm.streamer.reader.io  # the read path, resolved (a backend's default)
    summary["cache_counters"] = sm.streamer.cache.stats()  # since load, prefill included
    # the profile `--gamma auto` priced its passes on (None: not auto), given or not
    summary["gamma_auto_profile"] = run.auto.profile.name if run.auto else None
    summary["routing"] = "model" if routing is None else f"trace:{routing.model or 'given'}"
    text = sm.tokenizer.decode(run.generated)
    return GenerationResult(list(run.generated), text, records, summary, run.prefill_s)


def _generate(sm, prompt, drafter, cfg, profiles, records_path, stop_at_eos, on_pass, append,
              routing, reference, on_tokens) -> GenerationResult:  # fmt: skip
    cfg = cfg or DecodeConfig()
    spec = DrafterSpec.parse(drafter) if isinstance(drafter, str) else drafter
    eos = eos_ids(sm) if stop_at_eos else frozenset()
    writer = RecordWriter(records_path, append) if records_path else None
    # a run that fails before its first record leaves no records file behind (RecordWriter)
    with writer or contextlib.nullcontext():
        run = start(sm, prompt, spec, cfg, profiles, eos, reference)
        records: list[PassRecord] = []
        tap = RoutingRecorder() if records_path else None  # routing per pass, for the records
        shown = 0  # tokens given to on_tokens
        watch = sm.streamer.log.watching(tap) if tap else contextlib.nullcontext()
        with watch:
            for rec in run.passes():
                if tap:
                    rec.routing = tap.take_verify_rows()
                records.append(rec)
                if writer:
                    writer.write(rec)
                if on_pass:
                    on_pass(rec)
                if on_tokens:
                    on_tokens(run.generated_since(shown))
                    shown = run.n_generated
    return result(sm, run, records, spec, profiles, routing)
