"""One generation run from a drafter spec: decode, write records, summarise.

Used by `specdec generate` and the experiments; the oracle drafter gets its reference (the plain
greedy continuation) from a plain run on a fresh cache, and the cache is reset after it so the
measured run starts cold like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec.clock.profiles import DeviceProfile
from specdec.decode.drafters import make_drafter
from specdec.decode.loop import Decode, DecodeConfig
from specdec.decode.records import PassRecord, RecordWriter, summarize
from specdec.model.loader import StreamedModel


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


def plain_greedy(
    sm: StreamedModel, prompt: list[int], max_tokens: int, stop_at_eos: bool = True
) -> list[int]:
    """The plain greedy continuation (γ = 1); the cache is reset afterwards."""
    run = Decode(
        sm,
        prompt,
        make_drafter("none", sm),
        DecodeConfig(1, max_tokens),
        (),
        eos_ids(sm) if stop_at_eos else frozenset(),
    )
    for _ in run.passes():
        pass
    sm.reset_cache()
    return list(run.generated)


def generate(
    sm: StreamedModel,
    prompt: list[int],
    drafter: str = "none",
    cfg: DecodeConfig | None = None,
    profiles: tuple[DeviceProfile, ...] = (),
    records_path: Path | None = None,
    stop_at_eos: bool = True,
    on_pass: Callable[[PassRecord], None] | None = None,
) -> GenerationResult:
    """Decode `prompt` with `drafter`; `on_pass` sees each record once it is written (progress)."""
    cfg = cfg or DecodeConfig()
    eos = eos_ids(sm) if stop_at_eos else frozenset()
    reference = (
        plain_greedy(sm, prompt, cfg.max_tokens, stop_at_eos)
        if drafter.startswith("oracle")
        else None
    )
    run = Decode(sm, prompt, make_drafter(drafter, sm, reference, cfg.seed), cfg, profiles, eos)
    records: list[PassRecord] = []
    writer = RecordWriter(records_path) if records_path else None
    try:
        for rec in run.passes():
            records.append(rec)
            if writer:
                writer.write(rec)
            if on_pass:
                on_pass(rec)
    finally:
        if writer:
            writer.close()
    summary = summarize(records, [p.name for p in profiles])
    summary["drafter"] = drafter
    summary["prefill_s"] = run.prefill_s
    text = sm.tokenizer.decode(run.generated)
    return GenerationResult(list(run.generated), text, records, summary, run.prefill_s)
