"""What the decoding tasks share: load the configured model, decode once, describe the model.

    with loaded_model(cfg) as sm:
        res = decode(cfg, sm, run_dir)      # writes run_dir/records.jsonl, one line per pass

`model.path: random:FAMILY` builds a random-weight checkpoint once into the specdec cache
(SPECDEC_CACHE, default ~/.cache/specdec) so tests and plumbing runs need no trained model.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from specdec.cli.settings import stream_config
from specdec.clock.profiles import get_profile
from specdec.core.errors import SpecdecError
from specdec.core.files import durable_replace
from specdec.core.progress import progress
from specdec.decode.loop import DecodeConfig
from specdec.decode.records import PassRecord
from specdec.decode.run import GenerationResult, generate
from specdec.report.rundir import RECORDS
from specdec.stream.loader import StreamedModel, cache_root, load


def model_dir(path: str, bits: int | None) -> str:
    """`random:FAMILY` -> its generated checkpoint (built on first use); anything else as is."""
    if not path.startswith("random:"):
        return path
    from specdec.checkpoint.random_models import make_random

    family = path.partition(":")[2]
    out = cache_root() / "random" / f"{family}-{bits or 'f32'}"
    if not (out / "config.json").exists():
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # build aside, rename when whole
        make_random(family, tmp, bits=bits, seed=0, force=True)  # a dead run's leftover
        with contextlib.suppress(OSError):  # a parallel job may have renamed its copy first
            durable_replace(tmp, out)
    return str(out)


@contextlib.contextmanager
def loaded_model(cfg) -> Iterator[StreamedModel]:
    c, m = cfg.cache, cfg.model  # Hydra's cache and model groups, field for field
    stream = stream_config(
        c.budget, c.policy, c.hotlist, io=m.io, threads=m.threads, lookahead=c.lookahead
    )
    sm = load(model_dir(m.path, m.bits), stream, with_mtp=cfg.drafter_spec.needs_mtp)
    try:
        yield sm
    finally:
        sm.close()


def model_info(sm: StreamedModel) -> dict:
    """Facts about the loaded model that the reports need (k, N, layers, block size)."""
    index = sm.streamer.index
    main_layers = sm.main_moe_layers
    return {
        "model_type": sm.config["model_type"],
        "path": str(sm.source or sm.path),  # resolved: `model=tiny` is always the bundled one
        "hash": sm.model_hash,  # config.json + the pack's checksums (ExpertIndex.content_hash)
        "top_k": sm.top_k,
        "n_experts": int(index.layers[main_layers[0]].n_experts),
        "moe_layers": main_layers,
        "slot_bytes": int(index.slot_bytes),
        "cache_slots": int(sm.streamer.cache.n_slots),
        "has_mtp": sm.mtp is not None,
    }


def decode(cfg, sm: StreamedModel, run_dir: Path) -> GenerationResult:
    """One generation with the configured drafter and γ; records go to run_dir/records.jsonl."""
    if cfg.max_tokens < 2:
        raise SpecdecError(
            f"max_tokens={cfg.max_tokens}: the first token comes from the prefill, so a job "
            "needs max_tokens >= 2 to measure any verify pass"
        )
    profile = get_profile(cfg.device.profile)
    dcfg = DecodeConfig(
        gamma=cfg.gamma,
        max_tokens=cfg.max_tokens,
        temp=cfg.temp,
        seed=cfg.seed,
        verify_form=cfg.verify_form,
    )
    bar = _progress(cfg)
    try:
        return generate(
            sm,
            sm.encode(cfg.prompt),
            cfg.drafter_spec,
            dcfg,
            (profile,),
            run_dir / RECORDS,
            stop_at_eos=cfg.stop_at_eos,
            on_pass=(lambda rec: bar.update(rec.committed)) if bar else None,
        )
    finally:
        if bar:
            bar.close()


def _progress(cfg):
    if not cfg.progress:
        return None
    return progress(total=cfg.max_tokens, desc=f"{cfg.drafter_spec} γ={cfg.gamma}", unit="tok")


def per_layer_union(records: list[PassRecord]) -> dict[str, float]:
    """Mean verify union per MoE layer over the passes of one run."""
    layers = sorted({lid for r in records for lid in r.union}, key=int)
    return {lid: float(np.mean([r.union.get(lid, 0) for r in records])) for lid in layers}
