"""Host overhead of streaming: streamed decode vs mlx-lm's own decode of the same model.

    specdec bench overhead --model tiny --tokens 128 --pairs 7 --json

Three measurements, all greedy decode of the same prompt:

- `cli`: the peer in its own best configuration: `python -m mlx_lm generate` against
  `specdec generate --budget 100% --warm`, each a fresh process, same BLAS (the fast BLAS that
  specdec.core.blas finds, via LD_PRELOAD for both), alternating which goes first, `pairs` pairs.
  Both count decode speed the same way: tokens after the first over the time after the first
  (mlx-lm prints n / t over n - 1 steps, so its figure is scaled by (n - 1) / n). Like mlx-lm,
  which loads every weight first, `--warm` reads every expert at load (load time not counted by
  either).
- `in_process`: mlx-lm's `generate_step` and our decode alternating in one process, the cache
  warm (every expert resident, nothing read in the timed part): tokens/s, and the main thread's
  CPU time per token; their difference over the MoE layers is the host cost of streaming all
  in (blocks, deferred steps, records, decode loop), robust to other processes on the cores.
  Beside them, alternating too, the streamed model driven by mlx-lm's own `generate_step`: the
  streamed forward's cost apart from our loop's; and ours with each token's deferred steps run
  after it instead of HELD_TOKENS at a time, and WIDE_HELD at a time (the held tokens' effect);
  and ours with each MoE call's routing read on its own instead of a token's joined. And the
  cost of one host read of a small device array (`host_copy_us`: on CUDA `np.array` moves it
  into managed memory first).
- `split`: host time per MoE layer call of the streamed block, by part, as the main thread's
  CPU time (robust to waiting and to other processes on the cores): graph building (our call's
  own Python; `added_cpu` subtracts what mlx-lm's SwitchGLU spends on the same arithmetic),
  launch (the layer's async_eval: scheduling its graph, which mlx-lm does once per token for the
  whole graph, so it is left out of `added_cpu`; the all-in figure above counts both), cache
  step, deferred steps (run after the token), read issue and lookahead (L+d's router graph and
  the prefetch's cache work); sync wait as wall time. For a warm full budget (device tables, the
  synced path, lookahead 2) and a partial budget with lookahead 0 and 2 (lookahead 1 on a model
  of 2 MoE layers, none on one of 1: a router looks at most to the last; none on CUDA, where
  lookahead is refused). Each part is its CPU time less the timer's own cost (a thread CPU
  clock read is a system call: 1-4 µs here), calibrated on an empty function before and after
  each decode; `host_cpu_with_timer` keeps the uncorrected sum.
- `graph_nodes`: the primitives of one decode token's graph, mlx-lm's greedy step on the
  resident model against ours on the streamed model (every node is launch work where the host
  bounds the loop), and which primitives ours adds.
- `loop_us_per_token`: our greedy loop's wall µs a token at full budget by part (the next
  token's forward built and started, the deferred steps, their host reads of each call's
  routing, the records, the rest), beside mlx-lm's and our whole token: where the decode is
  bound by the host, the parts mlx-lm does not pay are the gap.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.models.switch_layers import SwitchGLU
from mlx_lm.utils import load as mlx_load

from specdec.core.accelerator import on_cuda, to_host
from specdec.core.attention import cudnn_sdpa
from specdec.core.blas import fast_blas_env
from specdec.decode import loop
from specdec.decode.loop import DecodeConfig
from specdec.decode.records import PassRecord
from specdec.decode.run import generate
from specdec.decode.state import DecodeState
from specdec.stream.loader import StreamedModel, load, resolve
from specdec.stream.source import ExpertSource
from specdec.stream.streamed import StreamedSwitchGLU
from specdec.stream.streamer import Deferred, Lookahead, Streamer

PROMPT = "import os\nimport sys\n\n\ndef main():\n    "
WIDE_HELD = 64  # the in-process run that holds more tokens' deferred steps than HELD_TOKENS
_MLX_RATE = re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec")


def _run(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {out.stderr.strip()[-400:]}")
    return out.stdout


def _ours(model: str, tokens: int, budget: str, env: dict[str, str], prompt: str) -> float:
    cmd = [sys.executable, "-m", "specdec", "generate", "--model", model, "--budget", budget]
    cmd += ["--max-tokens", str(tokens), "--prompt", prompt, "--io", "buffered", "--warm", "--json"]
    stats = json.loads(_run(cmd, env).strip().splitlines()[-1])["stats"]
    if stats["committed"] != tokens - 1:
        raise RuntimeError(f"specdec stopped after {stats['committed'] + 1} tokens, not {tokens}")
    return stats["tokens_per_s"]


def mlx_lm_rate(model: str, tokens: int, env: dict[str, str], prompt: str) -> float:
    """`python -m mlx_lm generate` in a fresh process with `env`: its decode tokens/s."""
    cmd = [sys.executable, "-m", "mlx_lm", "generate", "--model", str(resolve(model))]
    cmd += ["--prompt", prompt, "--max-tokens", str(tokens), "--ignore-chat-template"]
    n, rate = _MLX_RATE.search(_run(cmd, env)).groups()
    if int(n) != tokens:
        raise RuntimeError(f"mlx-lm stopped after {n} tokens, not {tokens}")
    return float(rate) * (int(n) - 1) / int(n)  # tokens after the first, like ours


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}


def cli_pairs(
    model: str, tokens: int, pairs: int, budget: str = "100%", prompt: str = PROMPT
) -> dict:
    """Fresh-process pairs, alternating order: tokens/s of each and their pairwise ratio."""
    env = fast_blas_env()
    ours, peer = [], []
    for i in range(pairs):
        if i % 2:
            peer.append(mlx_lm_rate(model, tokens, env, prompt))
            ours.append(_ours(model, tokens, budget, env, prompt))
        else:
            ours.append(_ours(model, tokens, budget, env, prompt))
            peer.append(mlx_lm_rate(model, tokens, env, prompt))
    ratios = [a / b for a, b in zip(ours, peer, strict=True)]
    return {
        "budget": budget,
        "blas": env.get("LD_PRELOAD", "reference"),
        # both sides' CUDA attention (specdec/core/attention.py; other backends ignore it)
        "cudnn_sdpa": cudnn_sdpa(env),
        "peer": "python -m mlx_lm generate --ignore-chat-template (fresh process)",
        "prompt": prompt,
        "specdec_tokens_per_s": _spread(ours),
        "mlx_lm_tokens_per_s": _spread(peer),
        "ratio": _spread(ratios),
    }


class HostSplit:
    """Exclusive time of wrapped functions, by part (a call's time less its children's): the
    main thread's CPU time (what the host spends, unaffected by waiting or by other processes
    taking the cores) and wall time (sync wait is wall: it is waiting).

    Reading the thread's CPU clock is a system call (1-4 µs on this VM, not a vDSO read), so
    each timed call inflates its own part and its caller's: `own_cpu` gives each part's CPU
    time less that, calibrated on an empty function timed in the same process (`calibrate`).
    """

    def __init__(self):
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.timed_kids: dict[str, int] = defaultdict(int)  # timed calls made from the part
        self._stack: list[list[float]] = []  # children's [cpu, wall, n timed] per open call
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*a, **kw):
            self._stack.append([0.0, 0.0, 0])
            c, w = time.thread_time(), time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                c, w = time.thread_time() - c, time.perf_counter() - w
                kids = self._stack.pop()
                self.cpu[part] += c - kids[0]
                self.wall[part] += w - kids[1]
                self.calls[part] += 1
                self.timed_kids[part] += kids[2]
                if self._stack:
                    self._stack[-1][0] += c
                    self._stack[-1][1] += w
                    self._stack[-1][2] += 1

        self._undo.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, timed)

    def restore(self) -> None:
        for owner, name, old in reversed(self._undo):
            if old is None:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._undo.clear()

    def own_cpu(self, timer: tuple[float, float]) -> dict[str, float]:
        """CPU seconds per part less the timer's cost: `timer` = (s a timed call adds to its own
        part, s it adds to its caller's part), from `calibrate`."""
        own, caller = timer
        return {
            p: t - self.calls[p] * own - self.timed_kids[p] * caller for p, t in self.cpu.items()
        }


class _Empty:
    def leaf(self) -> None:
        pass

    def caller(self, n: int) -> None:
        for _ in range(n):
            self.leaf()


def calibrate(n: int = 2000, rounds: int = 5) -> tuple[float, float]:
    """(CPU s a timed call adds to its own part, CPU s it adds to its caller's): the median over
    `rounds` of n timed calls of an empty method from a timed caller, less the same loop
    untimed."""
    owns, callers = [], []
    for _ in range(rounds):
        bare = _Empty()
        c = time.thread_time()
        bare.caller(n)
        loop = time.thread_time() - c
        hs = HostSplit()
        hs.wrap(_Empty, "leaf", "leaf")
        hs.wrap(_Empty, "caller", "caller")
        try:
            _Empty().caller(n)
        finally:
            hs.restore()
        owns.append(hs.cpu["leaf"] / n)
        callers.append((hs.cpu["caller"] - loop) / n)
    return statistics.median(owns), statistics.median(callers)


def _split(sm: StreamedModel, prompt: list[int], tokens: int, repeats: int) -> dict:
    """µs per MoE layer call, by part: the median over `repeats` decodes of each part's mean
    (a GC pause or a preemption inflates one run's part, not the median)."""
    runs = [_split_once(sm, prompt, tokens) for _ in range(repeats)]
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}


def _split_once(sm: StreamedModel, prompt: list[int], tokens: int) -> dict:
    """µs per MoE layer call, by part, of one decode (see the module docstring)."""
    hs = HostSplit()
    s = sm.streamer
    hs.wrap(StreamedSwitchGLU, "__call__", "graph")
    hs.wrap(StreamedSwitchGLU, "_launch", "launch")
    hs.wrap(Streamer, "sync", "sync_wait")
    hs.wrap(ExpertSource, "fetch", "cache_step")
    hs.wrap(ExpertSource, "hit", "cache_step")
    hs.wrap(Streamer, "catch_up", "deferred")
    hs.wrap(Lookahead, "route", "lookahead")
    hs.wrap(Streamer, "prefetch", "lookahead")
    hs.wrap(s.reader, "read", "read_issue")
    hs.wrap(s.reader, "submit", "read_issue")
    before = calibrate()
    try:
        res = generate(sm, prompt, "none", DecodeConfig(max_tokens=tokens), stop_at_eos=False)
    finally:
        hs.restore()
    after = calibrate()
    timer = ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2)
    calls = hs.calls["graph"]
    out = {f"{part}_cpu": 1e6 * t / calls for part, t in hs.own_cpu(timer).items()}
    for part in ("graph", "launch", "sync_wait", "cache_step", "deferred", "read_issue"):
        out.setdefault(f"{part}_cpu", 0.0)
    out.setdefault("lookahead_cpu", 0.0)
    out["host_cpu"] = sum(out.values())
    out["host_cpu_with_timer"] = 1e6 * sum(hs.cpu.values()) / calls  # before the correction
    out["timer_own_us"], out["timer_caller_us"] = 1e6 * timer[0], 1e6 * timer[1]
    out["sync_wait_wall"] = 1e6 * hs.wall.get("sync_wait", 0.0) / calls
    out["misses"] = res.summary["misses"]
    return out


LOOP_PARTS = ("next_forward", "routing_read", "deferred", "records")


def _loop_split(sm: StreamedModel, prompt: list[int], tokens: int, repeats: int) -> dict:
    """Wall µs per committed token of our greedy decode at full budget, by part: building and
    starting the next token's forward (`next_forward`), the deferred steps (`deferred`) and
    their host reads of each call's routing (`routing_read`), building the records
    (`records`), and the rest (`rest`: the host read of each token, which waits for its
    forward, and the loop itself); with each part's main-thread CPU µs. Timed from the first
    batch of held tokens yielded to the end (prefill, compilation and the first batch left out:
    at least 4 batches run); the median over `repeats` decodes of each part. Where the decode
    is bound by the host, every part adds to a token's time; against mlx-lm's µs a token
    (`_resident`) it says which part of the loop costs what mlx-lm does not pay."""
    from specdec.stream import streamer as streamer_module

    tokens = max(tokens, 4 * loop.HELD_TOKENS)
    runs = []
    for _ in range(repeats):
        hs, seen, mark = HostSplit(), [], {}

        def first_batch(rec: PassRecord, hs=hs, seen=seen, mark=mark) -> None:
            seen.append(rec)
            if not mark:  # the first record yielded: its batch's records are all built
                mark.update(batch=hs.calls["records"], wall=dict(hs.wall), cpu=dict(hs.cpu))

        hs.wrap(loop.Decode, "_start_next", "next_forward")
        hs.wrap(loop.Decode, "_record", "records")
        hs.wrap(Streamer, "catch_up", "deferred")
        hs.wrap(streamer_module, "to_host", "routing_read")
        try:
            generate(sm, prompt, "none", DecodeConfig(max_tokens=tokens), stop_at_eos=False,
                     on_pass=first_batch)  # fmt: skip
        finally:
            hs.restore()
        after = seen[mark["batch"] :]  # the batches after the first
        n = sum(r.committed for r in after)
        run = {f"{p}_wall": 1e6 * (hs.wall[p] - mark["wall"].get(p, 0.0)) / n for p in LOOP_PARTS}
        run |= {f"{p}_cpu": 1e6 * (hs.cpu[p] - mark["cpu"].get(p, 0.0)) / n for p in LOOP_PARTS}
        run["token_wall"] = 1e6 * sum(r.wall_s for r in after) / n
        run["rest_wall"] = run["token_wall"] - sum(run[f"{p}_wall"] for p in LOOP_PARTS)
        runs.append(run)
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]} | {
        "repeats": repeats,
        "tokens": tokens,
    }


def _glu_us(model, prompt: list[int], tokens: int) -> float:
    """CPU µs per call that mlx-lm's own SwitchGLU spends building its graph (resident)."""
    hs = HostSplit()
    hs.wrap(SwitchGLU, "__call__", "glu")
    before = calibrate()
    try:
        for _ in generate_step(mx.array(prompt), model, max_tokens=tokens):
            pass
    finally:
        hs.restore()
    own = (before[0] + calibrate()[0]) / 2
    return 1e6 * hs.own_cpu((own, 0.0))["glu"] / hs.calls["glu"]


def _resident(model, prompt: list[int], n: int) -> tuple[float, float]:
    """mlx-lm's decode: tokens/s after the first, and main-thread CPU µs per token (all of it)."""
    c = time.thread_time()
    t0 = time.perf_counter()
    for i, _ in enumerate(generate_step(mx.array(prompt), model, max_tokens=n)):
        if i == 0:
            t0 = time.perf_counter()  # exclude prefill, like our tokens_per_s
    tps = (n - 1) / (time.perf_counter() - t0)
    return tps, 1e6 * (time.thread_time() - c) / n


def drop_unrun(sm: StreamedModel) -> None:
    """Drop the deferred calls whose host steps nothing will run (a forward driven outside our
    loop, or built and never evaluated) and the steps logged since the last drain."""
    sm.streamer.deferred.clear()
    sm.streamer.log.drain()


def mlx_lm_step(model, last: mx.array, cache: list) -> tuple[mx.array, mx.array]:
    """mlx-lm's greedy decode step as generate_step's `_step` builds it (a closure, so restated
    here), lazy: its last pick [1] fed as `last[None]`, logits - logsumexp, the greedy
    sampler's argmax; the pick [1] and the log-probabilities [V] it yields."""
    logits = model(last[None], cache=cache)[:, -1, :]  # [1, V]
    logprobs = logits - mx.logsumexp(logits, keepdims=True)
    return mx.argmax(logprobs, axis=-1), logprobs.squeeze(0)


@contextlib.contextmanager
def loop_patched(held: int = 0, joined: bool = True) -> Iterator[None]:
    """Our loop inside the block with `held` tokens' deferred steps run together (0: as it is,
    loop.HELD_TOKENS; 1: each token's after it, as before the ninth session) and, with
    `joined=False`, each MoE call's routing read on its own (one host copy a call, as before
    the eleventh session; `Deferred.join`)."""
    default, join = loop.HELD_TOKENS, Deferred.join
    loop.HELD_TOKENS = held or default
    if not joined:
        Deferred.join = lambda self, since: None
    try:
        yield
    finally:
        loop.HELD_TOKENS, Deferred.join = default, join


def _streamed_in_mlx_lm_loop(sm: StreamedModel, prompt: list[int], n: int) -> float:
    """The streamed model driven by mlx-lm's `generate_step` instead of our decode loop:
    tokens/s after the first. Its deferred host steps are dropped (nothing reads them), so
    against `_resident` this is what the streamed forward costs, against `_streamed` what our
    loop (records, cache steps) adds."""
    tps, _ = _resident(sm.model, prompt, n)
    drop_unrun(sm)
    return tps


def _streamed(
    sm: StreamedModel, prompt: list[int], cfg: DecodeConfig, held: int = 0, joined: bool = True
) -> tuple[float, float]:
    """Ours, the same two figures; `held` and `joined` as `loop_patched` takes them."""
    c = time.thread_time()
    with loop_patched(held, joined):
        res = generate(sm, prompt, "none", cfg, stop_at_eos=False)
    assert res.summary["misses"] == 0, "the warm cache must hold every expert"
    return res.summary["tokens_per_s"], 1e6 * (time.thread_time() - c) / cfg.max_tokens


def _primitives(*outputs: mx.array) -> Counter:
    """The primitives in the graph of `outputs` (lazy), by name (MLX's dot export)."""
    with tempfile.TemporaryDirectory() as tmp:
        dot = Path(tmp) / "graph.dot"
        mx.export_to_dot(str(dot), *outputs)
        return Counter(re.findall(r'label ="(\w+)", shape=rectangle', dot.read_text()))


def graph_nodes(sm: StreamedModel, ref, prompt: list[int]) -> dict:
    """Primitives in one decode token's graph, built after the prompt and not evaluated:
    mlx-lm's greedy decode step on the resident model against ours on the streamed model at full
    budget (loop.greedy_graph: the pick [1, 1] the next forward is fed, its log-probability, the
    joined routing); mlx-lm's as `mlx_lm_step` restates it, both of its outputs started. Where
    the loop is bound by the host, every node is launch work; `extra`: ours less mlx-lm's, by
    primitive."""
    # the last pick as each side holds it: mlx-lm's [1] (its step expands it), ours [1, 1] (the
    # step before reshaped it: that reshape is in each token's graph, as the pick's)
    last, fed = (mx.array(p, dtype=mx.uint32) for p in ([prompt[-1]], [[prompt[-1]]]))
    cache = make_prompt_cache(ref)
    ref(mx.array([prompt[:-1]]), cache=cache)
    mx.eval([c.state for c in cache])
    theirs = _primitives(*mlx_lm_step(ref, last, cache))
    st = DecodeState(
        sm, make_prompt_cache(sm.model), list(prompt), len(prompt), 0.0, np.random.default_rng(0)
    )
    loop.prefill_head(st, False)
    sm.streamer.drain()  # the prefill ran: its deferred cache steps are taken
    with sm.streamer.serving(loop.VERIFY):
        built = loop.greedy_graph(st, fed)
    ours = _primitives(*(a for a in built if a is not None))
    drop_unrun(sm)  # the token was built, never run: no cache step to take
    extra = {k: ours[k] - theirs[k] for k in sorted(ours | theirs) if ours[k] != theirs[k]}
    return {"mlx_lm": sum(theirs.values()), "ours": sum(ours.values()), "extra": extra}


def host_copy_us(n: int = 200) -> dict:
    """µs to read one small array computed on the device (a MoE call's routing: [1, 1, 8]
    uint32) on the host, one at a time: by `np.array` (on MLX's CUDA backend a move into managed
    memory first) and by `specdec.core.accelerator.to_host` (tolist), the read specdec uses."""
    out = {}
    for name, read in (("np_array_us", np.array), ("to_host_us", to_host)):
        arrays = [mx.arange(8, dtype=mx.uint32).reshape(1, 1, 8) + i for i in range(n)]
        mx.eval(arrays)
        t0 = time.perf_counter()
        for a in arrays:
            read(a)
        out[name] = 1e6 * (time.perf_counter() - t0) / n
    return out | {"n": n}


def in_process(model: str, tokens: int, repeats: int, lookahead_budget: str) -> dict:
    """Warm in-process comparison and the host split (full budget; lookahead at a partial one)."""
    ref, tok = mlx_load(str(resolve(model)))
    prompt = tok.encode(PROMPT)
    cfg = DecodeConfig(max_tokens=tokens)
    split_runs = min(repeats, 3)
    sm = load(model, budget="100%", io="buffered", with_mtp=False, warm=True)
    try:
        generate(sm, prompt, "none", cfg, stop_at_eos=False)  # first run: compile, caches
        _streamed_in_mlx_lm_loop(sm, prompt, tokens)  # its first run: compile
        streamed, resident, cpu_s, cpu_r, forward_only, each, wide, apart = ([] for _ in range(8))
        for _ in range(repeats):
            tps, cpu = _resident(ref, prompt, tokens)
            resident.append(tps)
            cpu_r.append(cpu)
            tps, cpu = _streamed(sm, prompt, cfg)
            streamed.append(tps)
            cpu_s.append(cpu)
            forward_only.append(_streamed_in_mlx_lm_loop(sm, prompt, tokens))
            each.append(_streamed(sm, prompt, cfg, held=1)[0])
            wide.append(_streamed(sm, prompt, cfg, held=WIDE_HELD)[0])
            apart.append(_streamed(sm, prompt, cfg, joined=False)[0])
        layers = len(sm.main_moe_layers)
        loop_parts = _loop_split(sm, prompt, tokens, split_runs)
        split = {"full_budget": _split(sm, prompt, tokens, split_runs)}
        nodes = graph_nodes(sm, ref, prompt)
        sm.streamer.source.device_tables = False  # the synced path, for comparison
        split["full_budget_synced"] = _split(sm, prompt, tokens, split_runs)
    finally:
        sm.close()
    # a router looks at most to the last MoE layer; none on CUDA, where it is refused (loader)
    ahead = 0 if on_cuda() else min(2, layers - 1)
    if ahead:
        sm = load(model, budget="100%", io="buffered", with_mtp=False, warm=True, lookahead=ahead)
        try:
            split[f"full_budget_lookahead_{ahead}"] = _split(sm, prompt, tokens, split_runs)
        finally:
            sm.close()
    for d in sorted({0, ahead}):
        sm = load(model, budget=lookahead_budget, io="buffered", with_mtp=False, lookahead=d)
        try:
            split[f"budget_{lookahead_budget}_lookahead_{d}"] = _split(
                sm, prompt, tokens, split_runs
            )
        finally:
            sm.close()
    glu = _glu_us(ref, prompt, tokens)
    for v in split.values():  # mlx-lm schedules its graph once per token: no launch part
        v["added_cpu"] = v["host_cpu"] - v.get("launch_cpu", 0.0) - glu
    s_tps, r_tps = statistics.median(streamed), statistics.median(resident)
    return {
        "moe_layers": layers,
        "resident_tokens_per_s": _spread(resident),
        "streamed_tokens_per_s": _spread(streamed),
        # the streamed model in mlx-lm's own decode loop: the forward's cost without ours
        "streamed_model_in_mlx_lm_loop_tokens_per_s": _spread(forward_only),
        # ours with each token's deferred steps run after it (not HELD_TOKENS together)
        "streamed_steps_each_token_tokens_per_s": _spread(each),
        # ... and with WIDE_HELD tokens' steps together instead of HELD_TOKENS
        f"streamed_steps_{WIDE_HELD}_tokens_tokens_per_s": _spread(wide),
        # ... and with each MoE call's routing read on its own, not a token's joined
        "streamed_routing_per_call_tokens_per_s": _spread(apart),
        "ratio": s_tps / r_tps,
        "added_us_per_moe_layer": 1e6 * (1 / s_tps - 1 / r_tps) / layers,
        "main_thread_cpu_us_per_token": {"mlx_lm": _spread(cpu_r), "specdec": _spread(cpu_s)},
        # all in: every host cost of streaming (blocks, deferred steps, records, decode loop)
        "added_cpu_us_per_moe_layer": _spread(
            [(a - b) / layers for a, b in zip(cpu_s, cpu_r, strict=True)]
        ),
        "mlx_lm_switchglu_graph_us": glu,
        "host_us_per_moe_layer": split,
        # our loop's wall µs a token by part, beside mlx-lm's whole token
        "loop_us_per_token": loop_parts
        | {"mlx_lm_token_wall": 1e6 / r_tps, "ours_token_wall": 1e6 / s_tps},
        "host_copy": host_copy_us(),
        "graph_nodes": nodes,
    }


def measure_overhead(
    model: str = "tiny",
    tokens: int = 128,
    pairs: int = 7,
    lookahead_budget: str = "50%",
    repeats: int | None = None,
) -> dict:
    return {
        "model": str(model),
        "tokens": tokens,
        "prompt": PROMPT,
        "cli": cli_pairs(model, tokens, pairs),
        "in_process": in_process(model, tokens, repeats or pairs, lookahead_budget),
    }
