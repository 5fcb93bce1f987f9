"""Host overhead of streaming: streamed decode vs mlx-lm's own decode of the same model.

    specdec bench overhead --model tiny --tokens 128 --json

Both run greedy decode of the same prompt in one process, alternating, with a budget that
holds every expert (warmed up first, so no read happens in the timed part): what is left is
the host cost of the streamed path — the router sync, np.unique, the cache step, the slot remap,
and the per-layer evaluation. Reported: tokens/s of each, their ratio, and the added time per
MoE layer call in µs, (t_streamed - t_resident) / (tokens x MoE layers); plus the time spent
inside the streamed block's host code alone (the cache step and remap), measured directly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load as mlx_load

from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.model.loader import StreamedModel, load, resolve


def _resident_tps(model, prompt: list[int], n: int) -> float:
    t0 = time.perf_counter()
    for i, _ in enumerate(generate_step(mx.array(prompt), model, max_tokens=n)):
        if i == 0:
            t0 = time.perf_counter()  # exclude prefill, like our tokens_per_s
    return (n - 1) / (time.perf_counter() - t0)


def _host_us_per_step(sm: StreamedModel, prompt: list[int], n: int) -> float:
    """Mean µs inside Streamer.fetch (cache step + remap bookkeeping), all reads being hits."""
    s = sm.streamer
    inner = s.fetch
    spent: list[float] = []

    def timed(*a):
        t = time.perf_counter()
        out = inner(*a)
        spent.append(time.perf_counter() - t)
        return out

    s.fetch = timed
    try:
        generate(sm, prompt, "none", DecodeConfig(max_tokens=n), stop_at_eos=False)
    finally:
        del s.fetch
    return 1e6 * sum(spent) / max(len(spent), 1)


def measure_overhead(model: str = "tiny", tokens: int = 128, repeats: int = 3) -> dict:
    ref, tok = mlx_load(str(resolve(model)))
    sm = load(model, budget="100%", io="buffered", with_mtp=False)
    try:
        prompt = tok.encode("import os\nimport sys\n\n\ndef main():\n    ")
        generate(sm, prompt, "none", DecodeConfig(max_tokens=tokens), stop_at_eos=False)  # warm
        streamed, resident = [], []
        for _ in range(repeats):
            resident.append(_resident_tps(ref, prompt, tokens))
            res = generate(sm, prompt, "none", DecodeConfig(max_tokens=tokens), stop_at_eos=False)
            assert res.summary["misses"] == 0, "the warm cache must hold every expert"
            streamed.append(res.summary["tokens_per_s"])
        s_tps, r_tps = statistics.median(streamed), statistics.median(resident)
        moe_layers = len(sm.main_moe_layers)
        return {
            "model": str(model),
            "tokens": tokens,
            "repeats": repeats,
            "moe_layers": moe_layers,
            "resident_tokens_per_s": r_tps,
            "streamed_tokens_per_s": s_tps,
            "ratio": s_tps / r_tps,
            "added_us_per_moe_layer": 1e6 * (1 / s_tps - 1 / r_tps) / moe_layers,
            "fetch_us_per_moe_layer": _host_us_per_step(sm, prompt, tokens),
        }
    finally:
        sm.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    r = measure_overhead(args.model, args.tokens, args.repeats)
    if args.json:
        print(json.dumps(r))
    else:
        print(
            f"{r['model']}: resident {r['resident_tokens_per_s']:.1f} tok/s, streamed "
            f"{r['streamed_tokens_per_s']:.1f} tok/s (x{r['ratio']:.2f}); "
            f"+{r['added_us_per_moe_layer']:.0f} µs per MoE layer, of which "
            f"{r['fetch_us_per_moe_layer']:.0f} µs in the cache step"
        )
    return 0
