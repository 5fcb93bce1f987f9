"""The greedy decode loop taken apart, part by part, against mlx-lm's loop on one warm model.

    from specdec.bench.loop_parts import loop_parts
    loop_parts(DIR, tokens=256, rounds=5)  # {variant: {"wall_us": [...], "cpu_us": [...], ...}}

`python benchmarks/bench_cuda.py ... loop_parts` runs it per shape on a GPU (in fresh processes,
also with MLX's CUDA graphs off and with a larger CUDA graph cache); nothing here is a timed test.
Where a decode is bound by the host (MLX's CUDA backend at full budget: docs/results/cuda.md),
every µs of host work a token costs a µs, and ours spent ~340 µs a token more than the same
streamed model driven by mlx-lm's own loop (the twenty-seventh session's H100, Qwen3 shape). Each variant below drops or swaps one part of ours,
so the differences between them say which part costs what. Full budget `--warm` (every expert
resident: no read), greedy, one process, the variants in turn, their order reversed every other
round; each variant's tokens are checked equal to the first's, mlx-lm's on the resident model
where it runs (the same work timed):

    mlx_lm_resident   mlx-lm's generate_step on the resident model (mlx-lm as is)
    mlx_lm_streamed   generate_step on the streamed model (our deferred host steps dropped)
    ours              specdec.decode.run.generate, as `specdec generate` decodes
    ours_gc_off       ... with Python's collector off
    ours_replayed     ... its steps replayed from the routing read back, not counted
                      (loop.COUNT_STEPS; counted since the thirtieth session)
    ours_stream       ... on a stream of its own, as generate_step decodes (ours: the default)
    decode            Decode.passes() alone (no records kept, no summary)
    decode_no_records ... with each pass's record not built
    decode_held_1     ... each token's deferred steps run after it (loop.HELD_TOKENS = 1)
    decode_held_64    ... 64 tokens' together (16 by default)
    bare              loop.greedy_next in a bare pipelined loop, no host step run
    bare_pick_only    ... the pick read, not its log-probability
    bare_unjoined     ... the MoE calls' routing not joined (Deferred.join)
    bare_steps        ... each token's deferred host steps run after it
    bare_mlx_lm_step  mlx-lm's step (logits - logsumexp, argmax) in the same bare loop
    bare_mlx_lm_step_stream  ... on a stream of its own

Per variant: wall µs a token from the second token's start to the end (as both sides' tok/s
count), main-thread CPU µs a token over the whole call (the prefill's few ms included, the
same in every variant), per round, and their medians. `profiles`: one cProfile run of `ours`
and of `mlx_lm_streamed`, their functions by own time a token.
"""

from __future__ import annotations

import cProfile
import gc
import math
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from specdec.bench.overhead import PROMPT, drop_unrun, loop_patched, mlx_lm_step
from specdec.checkpoint.backend import fit_for_backends
from specdec.decode import loop
from specdec.decode.drafters import Drafter
from specdec.decode.run import generate
from specdec.decode.state import DecodeState
from specdec.stream.loader import StreamedModel, load, resolve

# a variant decodes n tokens: them, and the seconds from the second token's start to the last's
Variant = Callable[[int], tuple[list[int], float]]
PROFILED = ("ours", "mlx_lm_streamed")
TOP_FUNCTIONS = 25


def _mlx_lm(model, prompt: list[int]) -> Variant:
    def run(n: int) -> tuple[list[int], float]:
        out, t1 = [], 0.0
        for tok, _ in generate_step(mx.array(prompt), model, max_tokens=n):
            if not out:  # token 1 yielded: token 2 started before it (generate_step)
                t1 = time.perf_counter()
            out.append(int(tok))
        return out, time.perf_counter() - t1

    return run


def _dropping_steps(sm: StreamedModel, run: Variant) -> Variant:
    """`run` on the streamed model outside our loop: its deferred host steps never run, not
    even past Deferred.BOUND calls (on the thirtieth session's H100 a run of 256 tokens on the
    4-layer shape, 1028 calls, passed the bound and read each call's routing on its own: 2748
    against 1496 µs a token)."""

    def dropped(n: int) -> tuple[list[int], float]:
        deferred = sm.streamer.deferred
        deferred.BOUND = math.inf  # this instance only; the class's bound returns after
        try:
            return run(n)
        finally:
            del deferred.BOUND
            drop_unrun(sm)

    return dropped


def _ours(
    sm: StreamedModel, prompt: list[int], gc_off: bool = False, count: bool = True
) -> Variant:
    def run(n: int) -> tuple[list[int], float]:
        if gc_off:
            gc.disable()
        saved, loop.COUNT_STEPS = loop.COUNT_STEPS, count
        try:
            res = generate(sm, prompt, "none", loop.DecodeConfig(max_tokens=n), stop_at_eos=False)
        finally:
            gc.enable()
            loop.COUNT_STEPS = saved
        # its records' time, as its tok/s counts it (not the summary and text built after)
        return res.tokens, sum(r.wall_s for r in res.records)

    return run


def _own_stream(run: Variant) -> Variant:
    """`run` on a stream of its own, as mlx-lm's generate_step runs its steps (on its
    generation_stream); ours run on the default stream. The thirtieth session's first_tokens
    found ours faster on one (0.95 against 1.30 ms a token, MiniMax shape, 2 processes); the
    thirty-first's rounds here found noise both ways (docs/results/cuda.md)."""
    stream = mx.new_stream(mx.default_device())

    def on(n: int) -> tuple[list[int], float]:
        with mx.stream(stream):
            return run(n)

    return on


def _decode(sm: StreamedModel, prompt: list[int], records: bool = True, held: int = 0) -> Variant:
    def run(n: int) -> tuple[list[int], float]:
        d = loop.Decode(sm, prompt, Drafter(), loop.DecodeConfig(max_tokens=n))
        if not records:
            d._record = lambda *a, **k: sm.streamer.cache.verdict(0)
        t0 = time.perf_counter()
        with loop_patched(held):
            for _ in d.passes():
                pass
        return d.generated, time.perf_counter() - t0 - d.prefill_s

    return run


def _bare(sm: StreamedModel, prompt: list[int], mode: str) -> Variant:
    """greedy_next (or mlx-lm's step) pipelined as generate_step pipelines it: token t+1
    started before token t is read; the deferred host steps dropped, or run each token."""
    s = sm.streamer
    theirs = mode == "mlx_lm_step"

    def step(st: DecodeState, last: mx.array) -> tuple[mx.array, mx.array]:
        """The next token started after `last`, the pick as each side holds it: mlx-lm's [1]
        (its step expands it), ours [1, 1]."""
        if theirs:
            y, logprobs = mlx_lm_step(sm.model, last, st.cache)
            mx.async_eval(y, logprobs)
            return y, logprobs
        with s.serving(loop.VERIFY):
            return loop.greedy_next(st, last)

    def run(n: int) -> tuple[list[int], float]:
        with loop_patched(joined=mode != "unjoined"):
            return _run(n)

    def _run(n: int) -> tuple[list[int], float]:
        rng = np.random.default_rng(0)
        st = DecodeState(sm, make_prompt_cache(sm.model), list(prompt), len(prompt), 0.0, rng)
        loop.prefill_head(st, False)
        first = mx.array(prompt[-1:])  # [1]
        nxt, top = step(st, first if theirs else first[None])
        out, t1 = [], 0.0
        for i in range(n):
            mine = len(s.deferred)  # token i's calls; the next token's come after
            ahead = step(st, nxt) if i + 1 < n else None
            if mode == "pick_only" or theirs:
                out.append(nxt.item())
            else:
                out.append(loop.read_pick(nxt, top))
            if mode == "steps":
                s.drain(mine)
            else:
                s.deferred.clear()  # the next token's calls too: nothing reads them
            if i == 0:
                t1 = time.perf_counter()
            if ahead is not None:
                nxt, top = ahead
        wall = time.perf_counter() - t1
        drop_unrun(sm)
        return out, wall

    return run


def _timed(run: Variant, n: int) -> tuple[list[int], float, float]:
    """Tokens, wall µs a token after the first, main-thread CPU µs a token over the call."""
    gc.collect()  # another variant's garbage is not collected inside this one's time
    c = time.thread_time()
    tokens, wall = run(n)
    return tokens, 1e6 * wall / (n - 1), 1e6 * (time.thread_time() - c) / n


def _profile(run: Variant, n: int) -> list[dict]:
    """One run under cProfile: its TOP_FUNCTIONS functions by own time, per token."""
    prof = cProfile.Profile()
    prof.enable()
    run(n)
    prof.disable()
    rows = [
        {"function": f"{Path(file).name}:{line}({name})", "calls": nc / n, "own_us": 1e6 * tt / n}
        for (file, line, name), (_, nc, tt, _, _) in pstats.Stats(prof).stats.items()
    ]
    return sorted(rows, key=lambda r: -r["own_us"])[:TOP_FUNCTIONS]


def variants(sm: StreamedModel, resident, prompt: list[int]) -> dict[str, Variant]:
    """Every variant of the module docstring, on one streamed model and its resident twin."""
    return {
        "mlx_lm_resident": _mlx_lm(resident, prompt),
        "mlx_lm_streamed": _dropping_steps(sm, _mlx_lm(sm.model, prompt)),
        "ours": _ours(sm, prompt),
        "ours_gc_off": _ours(sm, prompt, gc_off=True),
        "ours_replayed": _ours(sm, prompt, count=False),
        "ours_stream": _own_stream(_ours(sm, prompt)),
        "decode": _decode(sm, prompt),
        "decode_no_records": _decode(sm, prompt, records=False),
        "decode_held_1": _decode(sm, prompt, held=1),
        "decode_held_64": _decode(sm, prompt, held=64),
        "bare": _bare(sm, prompt, "dropped"),
        "bare_pick_only": _bare(sm, prompt, "pick_only"),
        "bare_unjoined": _bare(sm, prompt, "unjoined"),
        "bare_steps": _bare(sm, prompt, "steps"),
        "bare_mlx_lm_step": _bare(sm, prompt, "mlx_lm_step"),
        "bare_mlx_lm_step_stream": _own_stream(_bare(sm, prompt, "mlx_lm_step")),
    }


def interleaved(runs: dict[str, Variant], tokens: int, rounds: int) -> dict[str, dict]:
    """Each of `runs` once to compile and warm, then `rounds` rounds of `tokens` tokens, the
    order reversed every other round; every run's tokens checked equal to the first's (the same
    work in every variant and round): per variant wall and main-thread CPU µs a token each round
    (`_timed`) and their medians."""
    reference = None

    def check(name: str, got: list[int]) -> None:
        nonlocal reference
        reference = reference or got
        if got != reference:
            raise AssertionError(f"loop_parts: {name}'s tokens part from the first variant's")

    for name, run in runs.items():
        check(name, run(tokens)[0])
    out = {name: {"wall_us": [], "cpu_us": []} for name in runs}
    for r in range(rounds):
        for name in list(runs) if r % 2 == 0 else reversed(runs):
            got, wall, cpu = _timed(runs[name], tokens)
            check(name, got)
            out[name]["wall_us"].append(wall)
            out[name]["cpu_us"].append(cpu)
    for v in out.values():
        v["wall_median"] = statistics.median(v["wall_us"])
        v["cpu_median"] = statistics.median(v["cpu_us"])
    return out


def loop_parts(
    model: str, tokens: int, rounds: int, only: list[str] | None = None, profiles: bool = True
) -> dict:
    """The variants (`only`: those named) on `model` at full budget --warm, `rounds` rounds of
    `tokens` tokens each; see the module docstring."""
    from mlx_lm.utils import load as mlx_load

    resident, tokenizer = mlx_load(str(resolve(model)))
    fit_for_backends(resident)  # mlx-lm's MLA as is cannot run on CUDA (checkpoint/backend.py)
    prompt = tokenizer.encode(PROMPT)
    sm = load(model, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        runs = variants(sm, resident, prompt)
        if only:
            unknown = sorted(set(only) - set(runs))
            if unknown:
                raise ValueError(f"no loop_parts variant {unknown}: choose from {sorted(runs)}")
            runs = {k: v for k, v in runs.items() if k in only}
        out = interleaved(runs, tokens, rounds)
        if profiles:
            out["profiles"] = {p: _profile(runs[p], tokens) for p in PROFILED if p in runs}
        out["moe_layers"] = len(sm.main_moe_layers)
    finally:
        sm.close()
    return out
