"""`specdec bench device`: a roofline device profile of this machine, from microbenchmarks.

    specdec bench device --model DIR --dir /data --out h200.yaml     # then --profile h200.yaml

The device model (specdec.clock.roofline) charges a forward with roofline compute, a fixed cost
per MoE layer and the reads it waits for. Each field here comes from one measurement on this
machine, named in the profile's `sources`, none of them from the runs the profile then models:

    read_curve        the read bench (specdec.bench.read, O_DIRECT into the arena; on CUDA into
                      slots the GPU has just computed on, as a decode's are) at the model's
                      block size, one point per reads in flight (--threads); from a test file
                      written first, or with --read-pack from the modeled model's own pack,
                      read in place; a point below one with fewer reads in flight pooled with
                      it (clock.profiles.non_decreasing: the medians are noise there)
    read_latency_s    O_DIRECT 4 KiB reads one at a time from the same file: the per-read cost
    peak_tflops       a 16-bit dense matmul (4096³), the accelerator's compute ceiling here
    mem_gbps          the expert kernel: the switch module's three projections of one layer by
                      mx.gather_qmm on arena views, timed at unions 1..64 of one position each;
                      bytes per expert / the time one more expert adds (the slope)
    router_sync_s     what one MoE layer costs beyond its roofline compute in a one-position
                      forward that syncs on its router (every expert resident, so nothing is
                      read): kernel launches, the host sync and this harness's host work; the
                      model's MoE layers are timed on --model, a checkpoint of the same kind
                      (a Python runtime pays this per layer: the seed question's 0.6 ms on an M4)
    position_s        what each position past the first adds per MoE layer to a decode-form verify
                      forward beyond its roofline compute (each position's calls are one-token
                      calls of their own: their launches and host work), the same way on the same
                      checkpoint: passes of 2, 4 and 8 positions by an oracle that drafts plain's
                      own tokens, so all are kept; the slope over the positions, plain's at 1
    miss_call_s       what a MoE layer call that reads costs beyond the time blocked on its reads,
                      its landing and its router sync: issuing the reads, the cache's slot
                      bookkeeping, the wake-up after them; plain one-position forwards of the
                      same checkpoint at a budget where calls miss (MISS_BUDGET, read from the
                      page cache: the reads' own time is measured and taken out), per pass its
                      time beyond the profile's price over its calls that read, the median

    land_gbps         landing: the expert kernel's first call over slots O_DIRECT has just read
                      into against the same call again, in a decode's order (the layer computes,
                      its slots are read into, it computes again: CUDA managed memory migrates
                      the pages back for the read and to the GPU on its first touch; nothing
                      measurable on a CPU or Apple's unified memory: null). Slots written by
                      numpy stores instead, interleaved, are kept beside it (`by_writer`)
    land_curve        the same at 1, 2, 4, 8, 16 and 32 fresh slots per call: GB/s by the number
                      of blocks one layer call lands (a decode lands 2-3, a wide verify 20-30)

reads_in_flight is the reader's thread count; overlap_reads is this harness's (off: a layer's
reads land before its experts run).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from specdec.bench.read import TOUCHED, bench_read
from specdec.clock.profiles import DeviceProfile, capped_latency, non_decreasing
from specdec.core.accelerator import on_cuda
from specdec.core.machine import machine_info
from specdec.store.reader import ExpertReader, default_io, page_cache_io

UNIONS = (1, 2, 4, 8, 16, 32, 64)
READ_RUN_BYTES, READ_ROUNDS = 1 << 30, 3
LAND_SLOTS = (1, 2, 4, 8, 16, 32)  # fresh slots a layer call lands: a decode 2-3, a verify 20-30
LAND_GBPS_SLOTS = 16  # the one count `land_gbps` is taken at (the curve's rate where it has none)
VERIFY_POSITIONS = (2, 4, 8)  # decode-form verify widths `position_s` is timed at (and plain's 1)
# `miss_call_s`'s cache: its calls miss a few blocks each, as a decode's below full budget do
MISS_BUDGET = "25%"


def _timed(fn, repeats: int = 5) -> float:
    """Median seconds of fn() (synchronised), after one warm-up call."""
    fn()
    mx.synchronize()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        mx.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _act_dtype():
    """The activations' dtype a model runs in here: bf16 on a GPU, float32 on the CPU (MLX's CPU
    matmuls have no 16-bit fast path)."""
    return mx.bfloat16 if mx.default_device() == mx.gpu else mx.float32


def matmul_tflops(n: int = 4096) -> dict:
    a = mx.random.normal((n, n)).astype(_act_dtype())
    b = mx.random.normal((n, n)).astype(_act_dtype())
    mx.eval(a, b)
    s = _timed(lambda: mx.eval(a @ b))
    return {"n": n, "dtype": str(_act_dtype()), "seconds": s, "tflops": 2 * n**3 / s / 1e12}


def _expert_arena(hidden: int, inter: int, n: int, bits: int, group: int):
    """An arena of n random 4-bit experts (gate, up, down) and its views by tensor name."""
    from specdec.store.arena import Arena
    from specdec.store.layout import ALIGN, TensorSpec

    specs, offset = [], 0
    for proj, (out, inp) in (("gate", (inter, hidden)), ("up", (inter, hidden)),
                             ("down", (hidden, inter))):  # fmt: skip
        for part, shape, dtype, item in (
            ("weight", (out, inp * bits // 32), "U32", 4),
            ("scales", (out, inp // group), "BF16", 2),
            ("biases", (out, inp // group), "BF16", 2),
        ):
            nbytes = int(np.prod(shape)) * item
            specs.append(TensorSpec(f"{proj}.{part}", dtype, shape, offset, nbytes))
            offset += -(-nbytes // 64) * 64
    arena = Arena(n, -(-offset // ALIGN) * ALIGN, specs, huge_pages=False)
    for s in range(n):
        _fill(arena, s, specs, np.random.default_rng(s))
    return arena, {t.name: arena.tensor_view(t) for t in specs}, sum(t.nbytes for t in specs)


def _fill(arena, slot: int, specs, rng) -> None:
    """Random codes; scales and biases that keep the values finite (what a read writes)."""
    for spec, piece in zip(
        sorted(specs, key=lambda t: t.offset), arena.segments(slot), strict=False
    ):
        if spec.dtype == "U32":
            piece[:] = rng.integers(0, 256, len(piece), dtype=np.uint8)
        else:
            piece[:] = np.array(mx.full((len(piece) // 2,), 0.01, mx.bfloat16).view(mx.uint8))


def _layer(views, x: mx.array, idx: mx.array, bits: int, group: int) -> mx.array:
    """The switch module's three projections of one layer on the arena's views (SwiGLU)."""

    def proj(name, v):
        return mx.gather_qmm(
            v, views[f"{name}.weight"], views[f"{name}.scales"], views[f"{name}.biases"],
            rhs_indices=idx, transpose=True, group_size=group, bits=bits, sorted_indices=True,
        )  # fmt: skip

    h = mx.expand_dims(x, (-2, -3))  # [u, 1, 1, H], as mlx-lm's SwitchGLU does
    g, up = proj("gate", h), proj("up", h)
    return proj("down", (g * mx.sigmoid(g)) * up)


def expert_kernel(hidden: int, inter: int, unions=UNIONS, bits: int = 4, group: int = 64) -> dict:
    """gather_qmm of gate, up and down on arena views of `max(unions)` slots, one position per
    expert: seconds per call against the union, and the bytes one expert's three take."""
    arena, views, expert_bytes = _expert_arena(hidden, inter, max(unions), bits, group)
    dtype, out = _act_dtype(), {}
    for u in unions:
        x = mx.random.normal((u, hidden)).astype(dtype)  # [u, H]: u positions, one expert each
        idx = mx.arange(u, dtype=mx.uint32).reshape(u, 1)  # [u, k=1], sorted
        out[u] = _timed(lambda x=x, idx=idx: mx.eval(_layer(views, x, idx, bits, group)))
    us = np.array(list(out), np.float64)
    slope, fixed = np.polyfit(us, np.array(list(out.values())), 1)
    return {
        "hidden": hidden,
        "inter": inter,
        "expert_bytes": expert_bytes,
        "seconds_by_union": {int(k): v for k, v in out.items()},
        "slope_s_per_expert": float(slope),
        "fixed_s": float(fixed),
        "gbps": expert_bytes / float(slope) / 1e9 if slope > 0 else None,
    }


def block_file(
    directory: Path, hidden: int, inter: int, blocks: int, bits: int = 4, group: int = 64
):
    """A packed experts.bin of `blocks` random experts of the expert arena's layout (finite
    values, what `_fill` writes) in `directory`, and its index: what O_DIRECT reads land."""
    from specdec.store.layout import EXPERTS_BIN, INDEX_VERSION, ExpertIndex, LayerLayout

    arena, _, _ = _expert_arena(hidden, inter, 1, bits, group)
    specs = [s.tensor for s in arena.segments_ if s.tensor]
    rng = np.random.default_rng(11)
    with open(directory / EXPERTS_BIN, "wb") as f:
        for _ in range(blocks):
            _fill(arena, 0, specs, rng)
            for piece in arena.segments(0):
                f.write(piece.tobytes())
    layout = LayerLayout(
        prefix="landing", n_experts=blocks, block_bytes=arena.slot_bytes, tensors=specs,
        offsets=arena.slot_bytes * np.arange(blocks, dtype=np.int64),
        crc32=np.zeros(blocks, dtype=np.uint32),
    )  # fmt: skip
    index = ExpertIndex(INDEX_VERSION, arena.slot_bytes, {0: layout})
    index.save(directory)
    return index


def landing(
    hidden: int, inter: int, n: int = 16, rounds: int = 5, bits: int = 4, group: int = 64,
    blocks: tuple[Path, Any] | None = None,
) -> dict:  # fmt: skip
    """What a block just written by the host costs the accelerator before it computes on it: the
    layer's first call over n freshly written slots against the same call again (landed).

    Each round follows a decode: the layer computes on its slots (on CUDA their managed pages
    then sit on the GPU), the slots are written, the layer computes again. Written two ways,
    interleaved round by round: `stored` by numpy stores, and with `blocks` = (directory,
    index) from `block_file`, `read` by O_DIRECT reads of the project's ExpertReader, as a
    decode's misses are (the profile takes that one). None where landing costs nothing
    measurable (the memory is where the accelerator computes)."""
    if not on_cuda():
        return {"slots": n, "bytes": 0, "extra_s": 0.0, "gbps": None,
                "why": "the accelerator computes on host memory where it lies (CPU, Metal)"}  # fmt: skip
    arena, views, expert_bytes = _expert_arena(hidden, inter, n, bits, group)
    x = mx.random.normal((n, hidden)).astype(_act_dtype())
    idx = mx.arange(n, dtype=mx.uint32).reshape(n, 1)
    rng = np.random.default_rng(7)
    specs = [s.tensor for s in arena.segments_ if s.tensor]
    writers = {"stored": lambda: [_fill(arena, s, specs, rng) for s in range(n)]}
    reader = None
    if blocks is not None:
        reader = ExpertReader(blocks[0], blocks[1], arena, io=default_io(), threads=8)
        count = blocks[1].layers[0].n_experts
        writers["read"] = lambda: reader.read(
            [(0, int(e), s) for s, e in enumerate(rng.choice(count, n, replace=False))]
        )
    extra: dict[str, list[float]] = {w: [] for w in writers}
    try:
        for _ in range(rounds):
            for name, write in writers.items():
                mx.eval(_layer(views, x, idx, bits, group))  # the slots' pages on the GPU
                write()
                mx.synchronize()
                t0 = time.perf_counter()
                mx.eval(_layer(views, x, idx, bits, group))
                first = time.perf_counter() - t0
                again = _timed(lambda: mx.eval(_layer(views, x, idx, bits, group)), repeats=3)
                extra[name].append(max(0.0, first - again))
    finally:
        if reader is not None:
            reader.close()
    by = {}
    for name, runs in extra.items():
        seconds = statistics.median(runs)
        gbps = n * expert_bytes / seconds / 1e9 if seconds > 0 else None
        by[name] = {"extra_s": seconds, "gbps": gbps if gbps is not None and gbps < 200 else None,
                    "rounds_s": runs}  # fmt: skip
    if reader is not None:
        # how the blocks got there: O_DIRECT into the slots themselves, or staged (pinned: then
        # copied onto them by DMA)
        by["read"]["io"], by["read"]["staged"] = reader.io, reader.stats.staged
    used = "read" if reader is not None else "stored"
    return {"slots": n, "bytes": n * expert_bytes, "written": used, **by[used], "by_writer": by}


def _land_curve_source(curve: list[dict]) -> str:
    ms = ", ".join(f"{p['slots']}: {p['extra_s'] * 1e3:.2f}" for p in curve)
    how = "O_DIRECT-read (decode's sequence)" if curve[0]["written"] == "read" else "host-stored"
    return f"landing at 1-32 freshly {how} experts per layer call, ms more than again: {ms}"


def slot_row_views(rows: mx.array, specs) -> list[mx.array]:
    """Each tensor as a strided column view of an array of slots [n, slot] (uint8): the arena's
    layout before dense regions, for comparisons (refused by MLX's CUDA quantized kernels)."""
    out = []
    for spec in specs:
        dt = mx.uint32 if spec.dtype == "U32" else mx.bfloat16
        first, k = spec.offset // spec.itemsize, spec.nbytes // spec.itemsize
        out.append(rows.view(dt)[:, first : first + k].reshape(rows.shape[0], *spec.shape))
    mx.eval(out)
    return out


def read_latency(directory: Path, reads: int = 256) -> dict:
    """O_DIRECT 4 KiB reads at random offsets of a 1 GiB file, one at a time."""
    import os

    from specdec.store.layout import ALIGN

    with tempfile.TemporaryDirectory(dir=directory) as d:
        path = Path(d) / "latency.bin"
        size = 1 << 30
        with open(path, "wb") as f:
            chunk = np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
            for _ in range(size // len(chunk)):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        try:
            raw = np.empty(2 * ALIGN, np.uint8)
            buf = raw[(-raw.ctypes.data) % ALIGN :][:ALIGN]
            offs = np.random.default_rng(1).integers(0, size // ALIGN, reads) * ALIGN
            times = []
            for off in offs.tolist():
                t0 = time.perf_counter()
                os.preadv(fd, [buf], off)
                times.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
    return {
        "reads": reads,
        "median_s": statistics.median(times),
        "p90_s": float(np.quantile(times, 0.9)),
    }


@contextlib.contextmanager
def _synced_decode(model: str, **load_kw) -> Iterator[tuple]:
    """`model` loaded (`load_kw`: its budget), every MoE call synced on its router (the host sync
    a call below full budget pays), its prompt decoded a few tokens (warm-up): (sm, prompt, the
    pass clock of plain decoding; the oracle's, too, drafts nothing on device)."""
    from specdec.clock.passes import PassClock
    from specdec.decode.drafters import Drafter
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    # from the page cache, landing as the runs do: a host write into CUDA's managed arena would
    # put the managed pages' faults in miss_call_s (1.77 ms a call on an H100, fifteenth session)
    sm = load(model, io=page_cache_io(), with_mtp=False, **load_kw)
    try:
        sm.streamer.source.table = lambda layer: None  # no device tables: the synced path
        prompt = sm.encode("def f(x):")
        generate(sm, prompt, "none", DecodeConfig(1, 4), stop_at_eos=False)
        yield sm, prompt, PassClock.for_decode(sm, Drafter())
    finally:
        sm.close()


def layer_cost(
    model: str, profile: DeviceProfile, tokens: int = 24, positions=VERIFY_POSITIONS
) -> dict:
    """Seconds beyond roofline compute on `profile` (a profile without these fixed costs), every
    expert resident and each MoE layer syncing on its router (nothing is read): in one-position
    forwards, per MoE layer (`per_layer_s`: router_sync_s); and in decode-form verify passes of P
    positions (an oracle drafting plain's own tokens, so every pass verifies P and keeps them),
    what each position past the first adds per MoE layer (`position_s`: the least-squares slope
    of the medians over P, the one-position forwards at P = 1)."""
    from specdec.decode.drafters import DrafterSpec
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate

    with _synced_decode(model, budget="100%", warm=True) as (sm, prompt, clock):
        longest = tokens * max(positions, default=1)
        plain = generate(sm, prompt, "none", DecodeConfig(1, longest + 1), stop_at_eos=False)
        layers = len(sm.main_moe_layers)

        def beyond(res, p: int) -> dict:
            """Passes that verified p positions: their median wall and excess over roofline."""
            quiet = [r for r in res.records if r.drafted == p - 1 and not any(r.misses.values())]
            extra = [r.wall_s - clock.remodel(profile, r).total_s for r in quiet]
            return {
                "positions": p,
                "passes": len(quiet),
                "wall_s": statistics.median(r.wall_s for r in quiet),
                "beyond_compute_s": statistics.median(extra),
            }

        one = beyond(plain, 1)
        rows = [one]
        oracle = DrafterSpec.parse("oracle:1.0")
        for p in positions:
            cfg = DecodeConfig(p, tokens * p)
            generate(sm, prompt, oracle, DecodeConfig(p, 2 * p), stop_at_eos=False,
                     reference=plain.tokens)  # fmt: skip  # warm-up at this width
            res = generate(sm, prompt, oracle, cfg, stop_at_eos=False, reference=plain.tokens)
            rows.append(beyond(res, p))
        x = np.array([r["positions"] for r in rows], np.float64) - 1.0
        y = np.array([r["beyond_compute_s"] for r in rows])
        slope = float(np.polyfit(x, y, 1)[0]) if len(rows) > 1 else 0.0
        return {
            "model": str(model),
            "moe_layers": layers,
            "passes": one["passes"],
            "wall_s": one["wall_s"],
            "beyond_compute_s": one["beyond_compute_s"],
            "per_layer_s": max(0.0, one["beyond_compute_s"]) / layers,
            "verify": rows,
            "position_s": max(0.0, slope) / layers,
        }


def miss_cost(
    model: str, profile: DeviceProfile, budget: str = MISS_BUDGET, tokens: int = 48
) -> dict:
    """Seconds a MoE layer call that reads costs beyond what `profile` (with its router sync and
    landing) charges it and beyond the time the caller was blocked on its reads: plain
    one-position forwards of `model` at `budget`, read from the page cache, every call synced on
    its router as below full budget; per pass that read, (wall − blocked − modeled with free
    reads) over its calls that read; `miss_call_s` the median."""
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate

    free = profile.diskless()  # the reads' time is the measured blocked time
    with _synced_decode(model, budget=budget) as (sm, prompt, clock):
        res = generate(sm, prompt, "none", DecodeConfig(1, tokens), stop_at_eos=False)
    per, calls, misses = [], 0, 0
    for r in res.records:
        n = sum(1 for m in r.misses.values() if m)  # the pass's MoE calls that read
        if n:
            per.append((r.wall_s - r.blocked_s - clock.remodel(free, r).total_s) / n)
            calls, misses = calls + n, misses + r.verify_misses
    return {
        "model": str(model),
        "budget": budget,
        "passes": len(per),
        "misses_per_call": misses / calls if calls else 0.0,
        "per_call_s": per,
        "miss_call_s": max(0.0, statistics.median(per)) if per else 0.0,
    }


def _miss_source(mc: dict) -> str:
    return (
        f"plain one-position forwards of {mc['model']} at {mc['budget']}, synced, read from the "
        f"page cache: median {mc['miss_call_s'] * 1e3:.3f} ms a call that read ({mc['passes']} "
        f"passes, {mc['misses_per_call']:.1f} blocks a call) beyond its blocked time, landing "
        f"and router sync"
    )


def _pooled_source(medians: tuple, curve: tuple) -> str:
    """What the curve's source adds where a point was pooled (clock.profiles.non_decreasing)."""
    if medians == curve:
        return ""
    raw = ", ".join(f"{n:g}: {g:.3g}" for n, g in medians)
    return f"; medians by reads in flight {raw}, pooled where one read slower than one before it"


def _position_source(lc: dict) -> str:
    widths = ", ".join(
        f"{r['positions']}: {r['beyond_compute_s'] * 1e3:.2f}" for r in lc["verify"]
    )  # fmt: skip
    return (
        f"decode-form verify passes of {lc['model']} at full residency, synced, an oracle keeping "
        f"every draft: ms beyond roofline compute a pass by positions ({widths}); slope per "
        f"further position over {lc['moe_layers']} MoE layers"
    )


def device_profile(
    name: str,
    model: str,
    directory: Path,
    block_bytes: int,
    threads: tuple[int, ...] = (1, 2, 4, 8, 16),
    hidden: int = 3072,
    inter: int = 1536,
    file_bytes: int = 4 << 30,
    read_pack: Path | None = None,
) -> tuple[DeviceProfile, dict[str, Any]]:
    """The profile and every measurement behind it; `read_pack`: the read curve from that
    packed model's blocks in place (its block size), not from a test file in `directory`."""
    mm = matmul_tflops()
    kern = expert_kernel(hidden, inter)
    with tempfile.TemporaryDirectory(dir=directory) as d:  # blocks the landing bench reads
        many = 2 * max(LAND_SLOTS)  # where landing costs nothing there is nothing to read
        blocks = (Path(d), block_file(Path(d), hidden, inter, many)) if on_cuda() else None
        curve_runs = [landing(hidden, inter, n, blocks=blocks) for n in LAND_SLOTS]
    land = next(r for r in curve_runs if r["slots"] == LAND_GBPS_SLOTS)
    land_curve = curve_runs if on_cuda() else []  # elsewhere each says why there is none
    landing_fields = {
        "land_gbps": None if land["gbps"] is None else float(f"{land['gbps']:.4g}"),
        "land_curve": tuple(
            (float(p["slots"]), float(f"{p['gbps']:.4g}"))
            for p in land_curve
            if p["gbps"] is not None
        ),
    }
    # on CUDA the runs read into slots the GPU computes on, by the backend's default io (pinned):
    # the bench reads into such slots the same way
    path = TOUCHED[default_io()] if on_cuda() else "preadv_direct_arena"
    # 1 GiB a point, 3 rounds: a 256 MiB point (the default) swung ±10% on the H200's disk
    reads = bench_read(directory, block_bytes, file_bytes, threads, rounds=READ_ROUNDS,
                       run_bytes=READ_RUN_BYTES, paths=(path,), pack=read_pack)  # fmt: skip
    lat = read_latency(directory)
    medians = tuple(
        (float(p["threads"]), float(p["gbps"])) for p in reads["paths"] if not p["page_cache"]
    )
    curve = non_decreasing(medians)
    provisional = DeviceProfile(
        name, mem_gbps=kern["gbps"], peak_tflops=mm["tflops"], router_sync_s=0.0,
        read_curve=curve, read_block_bytes=float(reads["block_bytes"]), read_latency_s=0.0,
        **landing_fields,
    )  # fmt: skip
    lc = layer_cost(model, provisional)
    router = lc["per_layer_s"]
    mc = miss_cost(model, replace(provisional, router_sync_s=router))
    latency = capped_latency(lat["median_s"], curve, reads["block_bytes"])
    profile = DeviceProfile(
        name,
        mem_gbps=float(f"{kern['gbps']:.4g}"),
        peak_tflops=float(f"{mm['tflops']:.4g}"),
        router_sync_s=router,
        position_s=lc["position_s"],
        miss_call_s=mc["miss_call_s"],
        read_curve=tuple((n, round(g, 3)) for n, g in curve),
        read_block_bytes=float(reads["block_bytes"]),
        read_latency_s=latency,
        reads_in_flight=8,
        overlap_reads=False,
        **landing_fields,
        description=f"{name}: measured by `specdec bench device` ({machine_info()['cpu']})",
        sources={
            "mem_gbps": f"expert kernel, {hidden}x{inter} 4-bit experts: {kern['expert_bytes']} "
            f"bytes / {kern['slope_s_per_expert'] * 1e6:.1f} µs per added expert (unions {list(UNIONS)})",
            "peak_tflops": f"{mm['dtype']} {mm['n']}³ matmul: {mm['seconds'] * 1e3:.2f} ms",
            "router_sync_s": f"one-position synced forwards of {model} at full residency: "
            f"{lc['wall_s'] * 1e3:.2f} ms median over {lc['passes']} passes, of which "
            f"{lc['beyond_compute_s'] * 1e3:.2f} ms beyond roofline compute, over "
            f"{lc['moe_layers']} MoE layers",
            "position_s": _position_source(lc),
            "miss_call_s": _miss_source(mc),
            "batched_verify": "false: this harness's verify, the decode form by default "
            "(each position as one-token calls)",
            "read_curve": f"read bench, {path}, {reads['block_bytes']}-byte blocks, "
            f"threads {list(threads)}, {READ_RUN_BYTES >> 20} MiB a point, median of "
            f"{READ_ROUNDS} rounds, {reads['source']}" + _pooled_source(medians, curve),
            "read_latency_s": f"O_DIRECT 4 KiB random reads one at a time: median "
            f"{lat['median_s'] * 1e6:.0f} µs (capped below a block's time at each point)",
            "reads_in_flight": "this harness's ExpertReader: 8 threads",
            "overlap_reads": "this harness: a layer's reads complete before its experts compute",
            "land_gbps": land.get("why")
            or f"landing: {land['slots']} freshly {land['written']} experts' first layer call took "
            f"{land['extra_s'] * 1e3:.2f} ms more than the same call again",
            "land_curve": land.get("why") or _land_curve_source(land_curve),
        },
    )
    details = {
        "matmul": mm,
        "expert_kernel": kern,
        "landing": land,
        "landing_curve": land_curve,
        "read_bench": reads,
        "read_latency": lat,
        "layer_cost": lc,
        "miss_cost": mc,
    }
    return profile, details
