"""The streamed path measured on an NVIDIA GPU (MLX's CUDA backend): writes results/cuda/*.json.

    python benchmarks/bench_cuda.py --shm /dev/shm/sd --disk ~/sd --out DIR STEP [STEP ...]
    steps: check offsets models exact overhead attention_speed profile reads batches span pinned big
           scale spec auto drafters lookahead shm where repeat forced ties first_tokens loop_parts

Run where `import mlx.core` is the CUDA build (`SPECDEC_BACKEND=cuda bash scripts/setup.sh`;
docs/results/cuda.md says how it ran on the lent H200). Each step writes DIR/STEP.json (with the
machine, versions and the command) as soon as it ends, so a run cut short keeps what finished
(a run step saves its runs so far after each run, `"partial"`, or with its `"error"`: merge_cuda
takes them; lockstep keeps the oracle's reference in --disk for the session's later commands);
`--deadline SECONDS` skips the steps, and the runs within a step, that would start after it.
Steps whose runs are priced (scale spec auto drafters lookahead shm) read the profile step's
DIR/h200.yaml or `--profile PATH`; without either they are refused before any step starts.
The disk of a lent machine drifts within minutes: a `profile` run again after the runs (its own
`--out`) is kept beside the first (merge_cuda.py: CARD-rN-2.yaml), and `python -m
analysis.cuda` can model the runs on the two's bracket ("A+B", specdec.clock.bracket).
Nothing here is a timed test.

    check      the CUDA facts the design rests on: dense arena views pass mx.gather_qmm where an
               array of slots' strided views is refused; mlx-lm's QuantizedMultiLinear refused
               as is, taken rank-safe (checkpoint/backend.py); O_DIRECT into the arena (CUDA
               managed memory) or the staging fallback
    offsets    where MLX's CUDA gather kernels stop finding a slot: gather_qmm (8 rows, 1 row,
               64 sorted rows; bf16 and float32 activations) and gather_mm on weights whose
               experts run past 2^31 and 2^32 elements, each slot's output against the same
               expert alone; and the arena's copy path (stream/streamed.py) at the same slots
    models     real-shape random checkpoints in --shm: qwen3-30b-a3b (4 layers), minimax-m2.5
               (2 and 4 layers), deepseek-v3 (4 layers, 64 experts, with MTP); with
               --exact-models, those and the 2-layer minimax (`profile` runs on it)
    exact      streamed greedy tokens vs mlx-lm's resident greedy on the same backend, budgets
               from one token's experts to 100% --warm, the bundled tiny model and the three
               shapes; γ = 4 lossless for oracle, self, lookup (and MTP on the DeepSeek-V3
               shapes); each layer's largest streamed - resident difference at 100%
    overhead   full budget --warm vs `python -m mlx_lm generate`, fresh processes, interleaved;
               and warm in one process (mlx-lm's generate_step against ours, alternating), with
               the host µs per MoE layer call by part (specdec.bench.overhead `in_process`);
               saved as each part ends (`"partial"` names the last), the warm part first;
               `--pairs 0`: the warm part alone
    attention_speed
               `python -m mlx_lm generate` on the 2-layer minimax shape (--tokens), fresh
               processes, MLX_CUDA_USE_CUDNN_SDPA 1 (MLX's default) against 0 (specdec's),
               --pairs rounds, the order alternating: what specdec's default does to mlx-lm
    profile    `specdec bench device`: this machine's device profile from microbenchmarks
               (its read curve from the 16-layer pack in place when `big` ran before it)
    reads      `specdec bench read` at the 16-layer model's block size: into a fresh arena, into
               slots the GPU has just read (managed pages migrate back), one block at a time
    batches    the reader into GPU-touched slots in batches of 1-32 blocks with a wait after
               each (as decoding reads a layer's misses) against one batch of the same blocks
    span       the profile's read path over a 4 GiB test file just written, the 16-layer pack
               across its whole file and within its first 4 GiB, interleaved; then the pack read
               back to back for 24 GiB (needs `big`)
    pinned     `--io pinned` (O_DIRECT into page-locked staging, then a copy-engine copy into
               the slot) against `--io direct`: the blocks it lands checked on the GPU, reads
               and landing in a layer's batches, plain decode at 10% and 9 GB (needs `big`)
    big        a 16-layer MiniMax-M2.5-shaped checkpoint (33 GB) made in --shm, packed to --disk,
               the source deleted; a calibrated MiniMax trace for routing
    scale      budgets from one token's experts to 9 GB, page cache bypassed (O_DIRECT), routing
               by the model's router and by the trace: tok/s, time blocked on reads, GB/s
    spec       oracle α 0.5-1.0 × γ 1/2/3/4/8 at three budgets, trace routing: measured seconds,
               a plain run before each α's runs and after the last (speed-ups against those);
               with --lockstep, each run in lockstep with a plain run of its own, a pass of
               each in turn on two loaded models (specdec/bench/lockstep.py: the disk's drift
               over minutes moved one grid's runs by up to 0.28x against the plain runs
               around them)
    auto       --gamma auto at --auto-alphas, beside the fixed γ of --auto-gammas between the same
               plain runs (γ = 1: the speculative path without a draft, the control that has
               auto's path without its bookkeeping: `python -m analysis.cuda auto_phases`)
    copies     the two copies a lockstep pair loads, their readers alone: the same blocks in
               calls of 2 into each copy's slots, the copies in turn (needs `big`)
    drafters   self and lookup at the same budgets
    lookahead  router lookahead L+1 / L+2 where reads dominate (the model's own router); on CUDA
               with pinned reads only (direct reads into managed memory changed greedy output)
    shm        the scale runs from a copy of the pack in /dev/shm: the "fast SSD" end (read
               pinned on CUDA, without O_DIRECT; buffered with --io direct)
    repeat     plain greedy run to run over --tokens: the 16-layer pack, trace routing, three
               runs at 100% --warm (no read while decoding) and two at 9 GB from a reset cache
               (--repeat-budgets; needs `big`); and mlx-lm's own resident greedy (`generate_step`) of each small
               shape `models` made before it, twice: the first token where each run departs from the first of its kind
               (the twenty-second session's 1024-token plain runs departed from token 277 on)
    forced     bit for bit, one fixed token sequence (--tokens, seeded) fed one token a call with a
               KV cache as decoding feeds it, on the 2-layer MiniMax shape `models` made: mlx-lm's
               resident model twice, the streamed one (24 slots: every layer evicts) twice, and
               streamed against resident; per pair the first step whose float32 logits differ
               and the largest |difference| (rounding that varies run to run shows in the
               resident pair, at the same steps; a slot race as large differences in the
               streamed pairs only); and mlx-lm's decode attention alone (its KVCache and
               scaled_dot_product_attention at the shape's heads, seeded random inputs, three
               runs in bfloat16 and in float32): the first step each run departs. The
               attention and the resident pair run with MLX_CUDA_USE_CUDNN_SDPA as this process
               has it (specdec's default 0) and in a child with the other value (1: MLX's
               default, cuDNN for a bfloat16 single query from 256 keys of a KV cache; 0:
               MLX's own fixed-order kernel; mlx/backend/cuda/
               scaled_dot_product_attention.cpp); keys ending _cudnn_sdpa_off ran with 0
    where      where a streamed pass's time not blocked on reads goes, per MoE layer call (trace
               routing, 9 GB and 10%, plain and oracle:1 γ 8): the router's sync, the wait for
               earlier layers before a read (slot safety), the reads, the layer's own GPU time
               (its output evaluated at once: landing its fresh blocks, then its experts), host
               CPU; with each call's positions and fresh blocks, to fit against
    ties       greedy picks where log-probabilities tie exactly (two equal maxima a row, seeded
               places, the vocabularies of the three shapes, bfloat16 and float32): each row's
               pick in a verify's [T, V] (specdec/decode/state.py `argmax_picks`, T = 8)
               against the same row decoded alone ([1, V], plain decoding's pick) and against
               the lower index of the two (mlx-lm's rule): a tie-break that depends on the rows
               in a call would part a verify from plain greedy where logits tie
    first_tokens
               each decode token's wall time in fresh processes at full budget on the Qwen3 and
               MiniMax shapes `models` made (--tokens, --pairs rounds, the order rotating):
               ours (its pass records, the loop the CLI runs, --warm), ours inside a stream of
               its own as mlx-lm's `generate_step` decodes (`generation_stream`; ours runs on
               the default stream), and mlx-lm's (`generate_step`, the time between its
               yields): the first HELD_TOKENS tokens' mean (the first held batch on shapes of
               up to 32 MoE layers: HELD_CALLS) against the rest's on each side, whether either
               pays in its first tokens a one-off cost that a short run's tok/s carries;
               --tokens >= 20
    loop_parts our greedy loop taken apart against mlx-lm's on the Qwen3 and MiniMax shapes
               `models` made, full budget --warm, one fresh process a shape (--tokens, --pairs
               rounds; specdec/bench/loop_parts.py names the variants): wall and main-thread
               CPU µs a token of each, and a cProfile of ours and of mlx-lm's loop; then on the
               Qwen3 shape a subset with MLX's CUDA graphs off (MLX_USE_CUDA_GRAPHS=0) and with
               a CUDA graph cache of 4000 (MLX_CUDA_GRAPH_CACHE_SIZE; MLX's is 400): where the
               host time of a token goes that mlx-lm's loop does not spend; --tokens >= 20;
               --loop-only V,W: those variants on both shapes alone (no profile, no MLX settings)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from specdec.core.attention import CUDNN_SDPA, cudnn_sdpa  # noqa: E402
from specdec.core.blas import fast_blas_env  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402

SPECDEC = [sys.executable, "-m", "specdec"]
PROMPT = "def f(x):"
MINIMAX_BLOCK = 7962624
ONE_TOKEN = "128slots"  # 16 layers × top-8: about one token's experts
BUDGETS = (ONE_TOKEN, "5%", "10%", "25%", "9GB")
SPEC_BUDGETS = (ONE_TOKEN, "10%", "9GB")
ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
GAMMAS = (2, 3, 4, 8)
SMALL = {  # preset, layers, experts
    "qwen3": ("qwen3-30b-a3b", 4, None),
    "minimax": ("minimax-m2.5", 2, None),
    "deepseek": ("deepseek-v3", 4, 64),
    # 1024 experts of 4.7M 4-bit elements a projection: at 100% the arena passes 2^32 of them
    "minimax4": ("minimax-m2.5", 4, None),
}


def sh(*cmd: str, timeout: int = 900) -> str:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd[:5])}: {out.stderr.strip()[-600:]}")
    return out.stdout


@functools.cache  # one card a process: saved with every run of a step (`_keep`)
def gpu_name() -> str:
    """The card, as nvidia-smi names it: a lent machine of this kind may be an H100 or an H200
    (the fourteenth session's was an H100), and nothing else in the machine info tells them apart."""
    try:
        return sh("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader").strip()
    except Exception as e:  # noqa: BLE001 -- a fact to report, not to stop on
        return repr(e)


def save(out: Path, step: str, result: dict, t0: float, done: bool = True) -> None:
    """STEP.json; done=False: what a step has so far (a lease can end mid-step), kept until the
    step's own save replaces it."""
    result = {
        "step": step,
        "seconds": round(time.perf_counter() - t0, 1),
        "command": " ".join(sys.argv),
        "mlx_device": str(mx.default_device()),
        "machine": machine_info(),
        "gpu": gpu_name(),
        **result,
    }
    # the home directory as "~", the repository relative: results are read on other machines
    write_result(out / f"{step}.json", json.loads(json.dumps(result, default=str)))
    print(f"[{step}] {'done' if done else 'saved so far'} in {result['seconds']} s", flush=True)


# ---------------------------------------------------------------- check


def check(args) -> dict:
    from mlx_lm.models.mla import MultiLinear

    from specdec.bench.device import slot_row_views
    from specdec.checkpoint.backend import fit_for_backends
    from specdec.store.arena import Arena
    from specdec.store.layout import ALIGN, TensorSpec

    out: dict = {"cuda": mx.cuda.is_available() if hasattr(mx, "cuda") else None}
    try:
        out["nvidia_smi"] = sh("nvidia-smi", "--query-gpu=name,memory.total,memory.used",
                               "--format=csv,noheader")  # fmt: skip
    except Exception as e:  # noqa: BLE001 -- a fact to report, not to stop on
        out["nvidia_smi"] = repr(e)
    h, i, n = 3072, 1536, 32
    w = mx.random.normal((n, i, h)).astype(mx.bfloat16)
    wq, sc, bi = mx.quantize(w, group_size=64, bits=4)
    specs, offset = [], 0
    for name, t, dt in (("weight", wq, "U32"), ("scales", sc, "BF16"), ("biases", bi, "BF16")):
        specs.append(TensorSpec(f"g.{name}", dt, t.shape[1:], offset, t[0].nbytes))
        offset += -(-t[0].nbytes // 64) * 64
    slot = -(-offset // ALIGN) * ALIGN
    arena = Arena(n, slot, specs)
    for s in range(n):
        for t, piece in zip((wq, sc, bi), arena.segments(s),
                                    strict=False):  # fmt: skip
            piece[:] = (
                np.array(t[s].view(mx.uint8) if t.dtype != mx.uint32 else t[s])
                .view(np.uint8)
                .ravel()
            )
    views = [arena.tensor_view(t) for t in specs]
    x = mx.random.normal((8, 1, 1, h)).astype(mx.bfloat16)
    idx = mx.array(np.sort(np.random.default_rng(0).choice(n, 8, replace=False))).reshape(8, 1)
    kw = dict(transpose=True, group_size=64, bits=4, sorted_indices=True)
    want = mx.gather_qmm(x, wq, sc, bi, rhs_indices=idx, **kw)
    got = mx.gather_qmm(x, *views, rhs_indices=idx, **kw)
    out["dense_views_equal"] = bool(mx.array_equal(got, want).item())
    strided = slot_row_views(mx.zeros((n, slot), dtype=mx.uint8), specs)
    try:
        mx.eval(mx.gather_qmm(x, *strided, rhs_indices=idx, **kw))
        out["strided_views"] = "accepted"
    except Exception as e:  # noqa: BLE001
        out["strided_views"] = f"refused: {str(e)[:200]}"
    ml = MultiLinear(64, 32, 4).to_quantized(64, 4)
    xm = mx.random.normal((1, 4, 8, 64)).astype(mx.bfloat16)
    try:
        mx.eval(ml(xm))
        out["multilinear_as_is"] = "accepted"
    except Exception as e:  # noqa: BLE001
        out["multilinear_as_is"] = f"refused: {str(e)[:200]}"
    fit_for_backends(ml)
    out["multilinear_rank_safe"] = list(ml(xm).shape)
    # O_DIRECT into the arena's memory (managed on CUDA), through the real reader
    from specdec.store.layout import EXPERTS_BIN, ExpertIndex, LayerLayout
    from specdec.store.reader import ExpertReader

    d = Path(args.disk) / "check"
    d.mkdir(parents=True, exist_ok=True)
    blocks = np.random.default_rng(1).integers(0, 256, (8, slot), dtype=np.uint8)
    (d / EXPERTS_BIN).write_bytes(blocks.tobytes())
    import zlib

    ly = LayerLayout("l", 8, slot, specs, np.arange(8, dtype=np.int64) * slot,
                     np.array([zlib.crc32(b) for b in blocks], np.uint32))  # fmt: skip
    index = ExpertIndex(1, slot, {1: ly})
    with ExpertReader(d, index, arena, io="direct", threads=4, verify_checksums=True) as r:
        r.read([(1, e, e) for e in range(8)])
        out["o_direct_into_arena"] = {"direct_layout": arena.direct, "staged": r.stats.staged}
    shutil.rmtree(d, ignore_errors=True)
    out["arena_huge_pages"] = arena.huge_page_fraction
    return out


def offsets(args, limits=(2**31, 2**32), qmm_nk=(1536, 3072), mm_nk=(2048, 2048)) -> dict:
    """The kernels at slots just below and past each of `limits` elements (the defaults: a
    MiniMax-M2.5 gate projection's 4.7M 4-bit elements a slot, bf16 experts of 4.2M)."""
    from specdec.stream.streamed import SlotCopy

    out: dict = {"mlx": mx.__version__}
    rng = np.random.default_rng(0)

    def case(name, run, w_parts, per_slot, n_rows, dtype, sorted_rows=False):
        """Slots around 2^31 and 2^32 elements: the output at each against the expert alone."""
        n_slots = w_parts[0].shape[0]
        k = w_parts[0].shape[-1] * (8 if w_parts[0].dtype == mx.uint32 else 1)
        x = mx.array(rng.standard_normal((n_rows, 1, k)).astype(np.float32)).astype(dtype)
        rows = []
        for lim in limits:
            for slot in (lim // per_slot - 1, lim // per_slot + 1):
                if slot >= n_slots:
                    continue
                idx = mx.full((n_rows,), slot, dtype=mx.uint32)
                row = {"slot": int(slot), "elements_from_start": int(slot) * per_slot}
                try:  # the expert alone: a one-slot view, its offset taken on the host in 64 bits
                    alone = run(
                        x, [p[slot : slot + 1] for p in w_parts], mx.zeros_like(idx), sorted_rows
                    )
                    got = run(x, w_parts, idx, sorted_rows)
                    picked, local = SlotCopy()(idx)
                    copies = [mx.take(p, picked, axis=0) for p in w_parts]
                    copied = run(x, copies, local, sorted_rows)
                    row["direct_equal"] = bool(mx.array_equal(got, alone).item())
                    row["copied_equal"] = bool(mx.array_equal(copied, alone).item())
                except RuntimeError as e:  # a refusal is a finding; the other cases still run
                    row["refused"] = str(e)[:200]
                rows.append(row)
        out[name] = rows
        print(f"  {name}: {rows}", flush=True)

    def qmm(x, parts, idx, sorted_rows):
        return mx.gather_qmm(x, *parts, rhs_indices=idx, transpose=True, group_size=64, bits=4,
                             sorted_indices=sorted_rows)  # fmt: skip

    n, k = qmm_nk
    n_slots = limits[-1] // (n * k) + 8
    w = mx.random.randint(0, 2**31, (n_slots, n, k // 8)).astype(mx.uint32)
    scales = (mx.random.uniform(shape=(n_slots, n, k // 64)) * 0.01).astype(mx.bfloat16)
    biases = (mx.random.uniform(shape=(n_slots, n, k // 64)) * -0.01).astype(mx.bfloat16)
    mx.eval(w, scales, biases)
    parts = [w, scales, biases]
    for rows, dtype, srt in ((8, mx.bfloat16, False), (1, mx.bfloat16, False),
                             (64, mx.bfloat16, True), (8, mx.float32, False)):  # fmt: skip
        name = f"gather_qmm rows={rows} {str(dtype).split('.')[-1]} sorted={srt}"
        case(name, qmm, parts, n * k, rows, dtype, srt)
    del w, scales, biases, parts
    mx.clear_cache()

    def mm(x, parts, idx, sorted_rows):
        return mx.gather_mm(x, parts[0].swapaxes(-1, -2), rhs_indices=idx,
                            sorted_indices=sorted_rows)  # fmt: skip

    n, k = mm_nk
    # made on the host: a device kernel over more than 2^32 elements fails to launch (seen)
    bits = rng.integers(0x3C00, 0x3F80, (limits[-1] // (n * k) + 8, n, k), dtype=np.uint16)
    wf = mx.array(bits).view(mx.bfloat16)  # values in [2^-7, 1)
    del bits
    mx.eval(wf)
    for rows, srt in ((8, False), (64, True)):
        case(f"gather_mm rows={rows} bf16 sorted={srt}", mm, [wf], n * k, rows, mx.bfloat16, srt)
    del wf
    mx.clear_cache()
    return out


# ---------------------------------------------------------------- models, exact


def named(args, key: str) -> bool:
    """`key` is among the shapes `--exact-models` names (none named: every shape)."""
    return not args.exact_models or key in args.exact_models.split(",")


def small_models(args) -> dict:
    """The shapes `--exact-models` names (default: all) and the one `profile` runs on."""
    out = {}
    for key, (preset, layers, experts) in SMALL.items():
        if not (named(args, key) or key == "minimax"):
            continue
        src = Path(args.shm) / key
        if not (src / "config.json").exists():
            cmd = [*SPECDEC, "make-random", "--like", preset, "--layers", str(layers), str(src)]
            sh(*cmd, *(["--experts", str(experts)] if experts else []))
        out[key] = {"dir": str(src), "bytes": sum(f.stat().st_size for f in src.iterdir())}
    return out


def resident(src: Path):
    """mlx-lm's resident model of `src` (QuantizedMultiLinear made rank-safe: mlx-lm as is
    cannot run DeepSeek-V3's MLA on CUDA)."""
    from mlx_lm import load as mlx_load

    from specdec.checkpoint.backend import fit_for_backends

    model, _ = mlx_load(str(src))
    fit_for_backends(model)
    return model


def reference_greedy(model, prompt: list[int], n: int) -> list[int]:
    """mlx-lm's own greedy decode (`generate_step`) of the resident model."""
    from mlx_lm.generate import generate_step

    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n)]


def exact(args) -> dict:
    from specdec.checkpoint.bundled import resolve_model

    out = {}
    n = 16
    models = {"tiny": resolve_model("tiny")} | {key: Path(args.shm) / key for key in SMALL}
    for key, src in models.items():
        if not named(args, key):
            continue
        try:
            out[key] = _exact_one(key, src, n)
        except Exception as e:  # noqa: BLE001 -- a fact to report; the other models still run
            out[key] = {"error": repr(e)[:400]}
    return out


def _exact_one(key: str, src: Path, n: int) -> dict:
    """One model's greedy tokens against mlx-lm's, per budget; drafters at γ 4; layer diffs."""
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    mtp = key in ("tiny", "deepseek")  # DeepSeek-V3 shapes: their MTP layer drafts too
    row: dict = {}
    sm = load(src, budget="25%", with_mtp=mtp)  # the backend's default io
    prompt = sm.encode(PROMPT)
    k_slots = sm.top_k * len(sm.main_moe_layers)
    sm.close()
    ref_model = resident(src)  # the reference, and the layer diffs' resident side
    ref = reference_greedy(ref_model, prompt, n)
    row["reference"] = ref
    for budget, warm in ((f"{k_slots}slots", False), ("25%", False), ("100%", True)):
        sm = load(src, budget=budget, warm=warm, with_mtp=mtp)
        try:
            res = generate(sm, prompt, "none", DecodeConfig(1, n), stop_at_eos=False)
            row[f"plain@{budget}"] = _agree(res.tokens, ref) | {
                "bytes_read": res.summary["bytes_read"],
                "hit_rate": res.summary["hit_rate"],
            }
            if budget == "100%":
                row["layer_diffs@100%"] = layer_diffs(ref_model, sm.model, prompt)
            if budget == "25%":
                drafters = ["oracle:0.9", "self", "lookup"] + (["mtp"] * mtp)
                for d in drafters:
                    sm.reset_cache()
                    spec = generate(sm, prompt, d, DecodeConfig(4, n), stop_at_eos=False)
                    row[f"{d}@γ4"] = _agree(spec.tokens, res.tokens) | {
                        "acceptance": spec.summary.get("acceptance")
                    }
        finally:
            sm.close()
    del ref_model
    mx.clear_cache()
    return row


def layer_diffs(resident_model, streamed, prompt: list[int]) -> dict:
    """Where streamed and resident part: the largest |difference| of each decoder layer's output
    over the prompt (one call, no cache), of the last position's logits, and the resident's
    top-1 minus top-2 logit there (a margin below the difference can flip greedy's first token)."""
    from mlx_lm.models.base import create_attention_mask

    x = mx.array([prompt])  # [1, T]
    hs, logits = [], []
    for m in (resident_model, streamed):
        h = m.model.embed_tokens(x)  # [1, T, H]
        mask = create_attention_mask(h, None, return_array=True)
        outs = []
        for layer in m.model.layers:
            h = layer(h, mask, cache=None)
            outs.append(h.astype(mx.float32))
        mx.eval(outs)
        hs.append(outs)
        logits.append(m(x)[0, -1].astype(mx.float32))  # [V]
    top2 = np.sort(np.array(logits[0]))[-2:]
    out = {
        "layers": [float(mx.abs(a - b).max()) for a, b in zip(*hs, strict=True)],
        "logits": float(mx.abs(logits[0] - logits[1]).max()),
        "resident_margin": float(top2[1] - top2[0]),
        "argmax": [int(mx.argmax(v)) for v in logits],
    }
    return out


def _agree(got: list[int], want: list[int]) -> dict:
    from specdec.decode.run import first_departure

    return {"equal": got == want, "first_departure": first_departure(got, want)}


# ---------------------------------------------------------------- overhead, profile


def launch_ab(src: Path, tokens: int = 64, rounds: int = 3) -> dict:
    """In one process, full budget --warm: tok/s with the token one graph (the default where the
    cache holds every expert) against an evaluation started per MoE layer (as below full
    budget), alternating; the difference per MoE layer is what a per-layer start costs here."""
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    sm = load(src, budget="100%", io="buffered", warm=True, with_mtp=False)
    source, prompt = sm.streamer.source, sm.encode(PROMPT)
    tps: dict = {"one graph per token": [], "started per layer": []}
    try:
        generate(sm, prompt, "none", DecodeConfig(1, 8), stop_at_eos=False)  # warm-up
        for _ in range(rounds):
            for name, holds_all in (("one graph per token", True), ("started per layer", False)):
                source.holds_all = holds_all  # False: the path below full budget
                res = generate(sm, prompt, "none", DecodeConfig(1, tokens), stop_at_eos=False)
                tps[name].append(res.summary["tokens_per_s"])
        n_moe = len(sm.main_moe_layers)
    finally:
        sm.close()
    med = {k: float(np.median(v)) for k, v in tps.items()}
    per_layer = (1 / med["started per layer"] - 1 / med["one graph per token"]) / n_moe
    return {"tokens_per_s": tps, "median": med, "us_per_moe_layer_saved": 1e6 * per_layer}


def overhead(args) -> dict:
    from specdec.bench.overhead import cli_pairs, in_process

    out: dict = {"launch_ab": {}}
    for key in ("qwen3", "minimax"):
        if not named(args, key):
            continue
        src = str(Path(args.shm) / key)
        try:  # each model's figures kept as they come: a failure loses only what is left
            if args.pairs:  # --pairs 0: the warm one-process runs alone
                out["launch_ab"][key] = launch_ab(Path(src))
            # warm first, then the fresh processes (the longer part), each saved as it comes:
            # the eighth session's lease ended inside this step and took all of it
            # 128 tokens, 5 alternations (the tenth session's 64 and 3 swung 0.66-1.07x)
            out[key] = {"moe_layers": SMALL[key][1], "in_process": in_process(src, 128, 5, "25%")}
            _so_far(args, out, f"{key} in process")
            if args.pairs:
                out[key] |= cli_pairs(src, 128, args.pairs, prompt=PROMPT)
        except Exception as e:  # noqa: BLE001 -- a fact to report; the other model still runs
            out.setdefault(key, {})["error"] = repr(e)[:400]
        _so_far(args, out, key)
    return out


ATTENTION_TOKENS = 512  # attention_speed: half the decode past cuDNN's 256 keys at least


def attention_speed(args) -> dict:
    """mlx-lm's own decode on the 2-layer MiniMax shape `models` made, fresh processes (`python
    -m mlx_lm generate`, --tokens), with MLX_CUDA_USE_CUDNN_SDPA 1 (MLX's default: cuDNN for a
    single query from 256 keys in bfloat16) and 0 (specdec's: MLX's own kernels), --pairs
    rounds, the order alternating: what specdec's default does to a peer's decode speed (its
    6-token prompt's prefill is too short to show what it does to a prefill's)."""
    from specdec.bench.overhead import mlx_lm_rate

    src = str(Path(args.shm) / "minimax")
    rates: dict[str, list[float]] = {"1": [], "0": []}
    for i in range(args.pairs):
        for value in ("1", "0") if i % 2 == 0 else ("0", "1"):
            env = fast_blas_env() | {CUDNN_SDPA: value}
            rates[value].append(mlx_lm_rate(src, args.tokens, env, PROMPT))
    return {"tokens": args.tokens, "model": src, "prompt": PROMPT,
            "tokens_per_s": {"cudnn_sdpa_1": rates["1"], "cudnn_sdpa_0": rates["0"]},
            "off_over_on": [off / on for on, off in zip(rates["1"], rates["0"], strict=True)]}  # fmt: skip


def _so_far(args, out: dict, through: str, step: str = "overhead") -> None:
    save(Path(args.out), step, {"session": args.session, "partial": through, **out},
         args.step_t0, done=False)  # fmt: skip


def profile(args) -> dict:
    """`specdec bench device`; its read curve from the 16-layer pack in place where `big` has
    made it (the blocks the priced runs read), else from a test file."""
    prof, det = Path(args.out) / "h200.yaml", Path(args.out) / "profile_details.json"
    packed = Path(args.disk) / "mm16.packed"
    pack = ["--read-pack", str(packed)] if (packed / "experts.json").exists() else []
    sh(*SPECDEC, "bench", "device", "--out", str(prof), "--name", "h200", "--model",
       str(Path(args.shm) / "minimax"), "--dir", args.disk, "--details", str(det), "--overwrite",
       *pack)  # fmt: skip
    return {"profile": prof.read_text(), "details": json.loads(det.read_text())}


def reads(args) -> dict:
    paths = ("preadv_direct_arena", "preadv_direct_arena_gpu_touched",
             "preadv_direct_arena_one_by_one")  # fmt: skip
    got = sh(*SPECDEC, "bench", "read", "--json", "--no-profile", "--quiet", "--dir", args.disk,
             "--block-bytes", str(MINIMAX_BLOCK), "--file-bytes", str(4 << 30), "--threads", "1",
             "4", "8", "--rounds", "2", "--paths", *paths)  # fmt: skip
    return json.loads(got)


def _in_batches(
    reader, arena, directory: Path, rng, blocks: int, batch: int
) -> tuple[float, float]:
    """`blocks` random blocks of the bench file read into GPU-touched slots as decoding reads a
    layer's misses, `batch` at a time with a wait after each, the arena then touched by the GPU
    as the layer's experts are (its fresh blocks land): (seconds reading, seconds touching)."""
    from specdec.bench.read import ARENA_SLOTS, drop_page_cache
    from specdec.store.layout import EXPERTS_BIN

    order = rng.permutation(reader.index.layers[0].n_experts)[:blocks].tolist()
    reqs = [(0, e, i % ARENA_SLOTS) for i, e in enumerate(order)]
    drop_page_cache(directory / EXPERTS_BIN)
    arena.touch()
    read = touch = 0.0
    for i in range(0, blocks, batch):
        t0 = time.perf_counter()
        reader.read(reqs[i : i + batch])
        t1 = time.perf_counter()
        arena.touch()
        read, touch = read + t1 - t0, touch + time.perf_counter() - t1
    return read, touch


def batches(args, sizes=(1, 2, 3, 4, 8, 16, 32), blocks: int = 128, rounds: int = 2) -> dict:
    """The reader (8 threads, O_DIRECT) into GPU-touched arena slots, `blocks` random MiniMax
    blocks read as decoding reads a layer's misses — in batches of B with a wait after each,
    the slots then touched by the GPU as that layer's experts are — against the same count as
    one batch (as the profile's read bench reads). Rounds interleave every size."""
    from specdec.bench.read import make_bench_file
    from specdec.store.reader import ExpertReader

    d = Path(args.disk) / "batches"
    d.mkdir(parents=True, exist_ok=True)
    bf = make_bench_file(d, MINIMAX_BLOCK, 4 << 30)
    rng = np.random.default_rng(0)
    gbps: dict = {str(b): [] for b in (*sizes, "one batch")}
    try:
        with ExpertReader(bf.dir, bf.index, bf.arena, io="direct", threads=8) as reader:
            for _ in range(rounds):
                for b in (*sizes, "one batch"):
                    step = blocks if b == "one batch" else b
                    spent, _ = _in_batches(reader, bf.arena, d, rng, blocks, step)
                    gbps[str(b)].append(blocks * MINIMAX_BLOCK / spent / 1e9)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med = {k: float(np.median(v)) for k, v in gbps.items()}
    print(f"  batches: {med}", flush=True)
    return {"block_bytes": MINIMAX_BLOCK, "blocks": blocks, "gbps": gbps, "median": med}


def span(args, rounds: int = 4, threads=(1, 8), window: int = 4 << 30, sustained: int = 24) -> dict:
    """Whether the disk reads the 16-layer pack's blocks as fast as the profile's read bench
    reads its test file (the runs have read 10-20% slower than that curve since the fifteenth
    session). The profile's read path (pinned on CUDA, into GPU-touched slots) over 1 GiB of
    random blocks of: a 4 GiB test file just written (the profile's bench); the pack across its
    whole file; the pack's blocks within its first 4 GiB (a span like the test file's, written
    minutes before, as the pack was). Rounds shuffle every source and thread count. Then the
    pack read back to back, 1 GiB a run at 8 threads, `sustained` GiB: whether the disk's rate
    falls as it keeps reading (a burst allowance spent). Needs `big`."""
    from specdec.bench.read import TOUCHED, make_bench_file, open_bench_pack, time_path
    from specdec.store.reader import default_io

    packed, d = Path(args.disk) / "mm16.packed", Path(args.disk) / "span"
    d.mkdir(parents=True, exist_ok=True)
    path, n_reads = TOUCHED[default_io()], (1 << 30) // MINIMAX_BLOCK
    try:
        sources = {
            "test file": make_bench_file(d, MINIMAX_BLOCK, window),
            "pack": open_bench_pack(packed),
            "pack, first 4 GiB": open_bench_pack(packed, window),
        }
        jobs = [(src, t) for src in sources for t in threads]
        gbps: dict[str, list[float]] = {f"{src}@{t}": [] for src, t in jobs}
        rng = np.random.default_rng(0)
        for r in range(rounds):
            for i in rng.permutation(len(jobs)):
                src, t = jobs[i]
                gbps[f"{src}@{t}"].append(
                    time_path(path, sources[src], t, n_reads, 1000 * r + i)[0]
                )
        back_to_back = [
            time_path(path, sources["pack"], 8, n_reads, 50_000 + c)[0] for c in range(sustained)
        ]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med = {k: float(np.median(v)) for k, v in gbps.items()}
    print(f"  span: {med}; back to back {[round(g, 2) for g in back_to_back]}", flush=True)
    return {"path": path, "block_bytes": MINIMAX_BLOCK, "bytes_per_run": n_reads * MINIMAX_BLOCK,
            "pack_bytes": sources["pack"].index.file_bytes, "gbps": gbps, "median": med,
            "back_to_back_gbps": back_to_back}  # fmt: skip


def pinned(args, blocks: int = 256, batch: int = 8, rounds: int = 4) -> dict:
    """`--io pinned` (specdec.store.cuda_copy) against `--io direct`. First what it lands: a
    slot's worth of random MiniMax blocks read pinned into GPU-touched slots, each compared on
    the GPU with the file's bytes. Then the reader (8 threads) into GPU-touched slots, `blocks`
    random blocks in batches of `batch` (a layer's misses) with the arena touched by the GPU
    after each, the read's time and the touch's (the fresh blocks landing) kept apart, rounds
    interleaving both modes. Then plain decoding at 10% and 9 GB (trace routing), the two modes
    alternating, twice: measured tok/s and time blocked, and the tokens, which must not differ."""
    from specdec.bench.read import ARENA_SLOTS, make_bench_file
    from specdec.store.arena import Arena, block_layout
    from specdec.store.layout import EXPERTS_BIN
    from specdec.store.reader import ExpertReader

    d = Path(args.disk) / "pinned"
    d.mkdir(parents=True, exist_ok=True)
    bf = make_bench_file(d, MINIMAX_BLOCK, 4 << 30)
    n, rng = bf.layout.n_experts, np.random.default_rng(0)
    arena = Arena(ARENA_SLOTS, MINIMAX_BLOCK, block_layout(bf.index))  # its block a tensor
    view = arena.tensor_view(bf.layout.tensors[0])  # [slots, block bytes] uint8
    out: dict = {"block_bytes": MINIMAX_BLOCK, "blocks": blocks, "batch": batch}
    try:
        with ExpertReader(bf.dir, bf.index, arena, io="pinned", threads=8) as reader:
            arena.touch()
            order = rng.permutation(n)[:ARENA_SLOTS].tolist()
            reader.read([(0, e, s) for s, e in enumerate(order)])
            with open(d / EXPERTS_BIN, "rb") as f:
                equal = [
                    bool(mx.array_equal(view[s], mx.array(np.frombuffer(
                        os.pread(f.fileno(), MINIMAX_BLOCK, e * MINIMAX_BLOCK), np.uint8))).item())
                    for s, e in enumerate(order)
                ]  # fmt: skip
            out["landed_equal"] = f"{sum(equal)} of {len(equal)}"
        print(f"  pinned: blocks equal to the file {out['landed_equal']}", flush=True)
        spent: dict[str, list[tuple[float, float]]] = {"direct": [], "pinned": []}
        for _ in range(rounds):
            for io, rounds_so_far in spent.items():
                with ExpertReader(bf.dir, bf.index, arena, io=io, threads=8) as reader:
                    rounds_so_far.append(_in_batches(reader, arena, d, rng, blocks, batch))
        gb = blocks * MINIMAX_BLOCK / 1e9
        out["reads"] = {
            io: {
                "read_gbps": [gb / r for r, _ in got],
                "read_and_land_gbps": [gb / (r + u) for r, u in got],
                "touch_ms_a_batch": [1e3 * u / (blocks // batch) for _, u in got],
            }
            for io, got in spent.items()
        }
        print(f"  pinned: {json.dumps(out['reads'])}", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    packed, plan = (
        Path(args.disk) / "mm16.packed",
        [(b, "none", 1, "trace", 0) for b in ("10%", "9GB")],
    )
    out["runs"] = [row for _ in range(2) for io in ("direct", "pinned")
                   for row in _runs(args, packed, plan, io, "pinned")]  # fmt: skip
    return out


# ---------------------------------------------------------------- the 16-layer model


def big(args) -> dict:
    src, packed = Path(args.shm) / "mm16", Path(args.disk) / "mm16.packed"
    trace = _trace_dir(args)
    out = {}
    if not (packed / "experts.json").exists():
        t = time.perf_counter()
        sh(*SPECDEC, "make-random", "--like", "minimax-m2.5", "--layers", "16", str(src),
           timeout=1200)  # fmt: skip
        out["make_random_s"] = time.perf_counter() - t
        t = time.perf_counter()
        sh(*SPECDEC, "pack", str(src), str(packed), timeout=1200)
        out["pack_s"] = time.perf_counter() - t
        shutil.rmtree(src)
    if not (trace / "meta.json").exists():
        sh(*SPECDEC, "trace", "synth", "--like", "minimax-m2.5", "--positions", "4000",
           "--seed", "0", str(trace))  # fmt: skip
    out["packed_bytes"] = sum(f.stat().st_size for f in packed.iterdir())
    return out


def read_beside(sm, blocks: int = 96, seed: int = 0) -> float:
    """GB/s of the loaded model's own reader (its threads and io, into its arena's slots, which
    the GPU has computed on) over `blocks` random expert blocks, read right before a run: the
    disk's rate that minute, since it drifts ±20% between a profile's bench and the runs. It
    overwrites slots the cache still names: the caller resets the cache before decoding."""
    src = sm.streamer.source
    src.flush()
    reqs = random_requests(src, blocks, seed)
    t = time.perf_counter()
    src.reader.read(reqs)
    return len(reqs) * src.index.slot_bytes / (time.perf_counter() - t) / 1e9


def random_requests(src, blocks: int, seed: int) -> list[tuple[int, int, int]]:
    """(layer, expert, slot) of `blocks` distinct random expert blocks of `src`'s pack (every
    block, where fewer), seeded, into its arena's slots in turn."""
    keys, n_slots = src.index.blocks(), src.arena.n_slots
    pick = np.random.default_rng(seed).choice(len(keys), min(blocks, len(keys)), replace=False)
    return [(*keys[i], j % n_slots) for j, i in enumerate(pick)]


def copies(args, blocks: int = 192, batch: int = 2, rounds: int = 8, seed: int = 1) -> dict:
    """The two copies a lockstep pair loads (the 16-layer pack at the first --spec-budgets budget,
    trace routing), their readers alone, each staging in 2 MiB pages and in 4 KiB pages
    (`ExpertReader.huge_staging`). Each copy decodes 24 plain tokens first (its arena's slots
    then hold pages the GPU has computed on, as in a run) and reads the blocks once untimed with
    each staging (every thread then holds both buffers). Then the same `blocks` random blocks (or
    every block, where fewer) are read into each copy's slots in calls of `batch` (a decode at
    9 GB reads 2.1-2.3 blocks a call), copy and staging in turn: which copy goes first alternates
    round to round, which staging every second round. Per round, copy and staging: ms a call
    (mean and median), a call's thread-ms in preadv, landing and a worker's wake-up (store.reader
    READ_SPLIT); the copies' measured staging huge pages; the median second / first ratio per
    staging and 4 KiB / 2 MiB per copy. Before any staging was in huge pages, the thirty-sixth
    session's pairs blocked 2.1-2.8% longer a read call on the second-loaded copy, whichever run
    it carried, and the thirty-seventh's readers alone 5.7%, 24% more preadv thread-ms; the
    thirty-eighth's, at 9 GB, 5.6% in either staging (preadv thread-ms 4% apart in 2 MiB pages),
    while its decode pairs blocked alike (docs/results/cuda.md); needs `big`."""
    from specdec.bench.lockstep import two_models
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.store.reader import READ_SPLIT

    packed, trace = Path(args.disk) / "mm16.packed", _trace(args)
    budget = args.spec_budgets.split(",")[0]
    out: dict = {"budget": budget, "batch": batch, "rounds": []}
    kinds = {"2MiB": True, "4KiB": False}  # staging's pages: ExpertReader.huge_staging
    with two_models(packed, budget, io=args.io, with_mtp=False) as models:
        for sm in models:
            generate(sm, sm.encode(PROMPT), "none", DecodeConfig(1, 24), stop_at_eos=False,
                     routing=trace)  # fmt: skip
            sm.reset_cache()
        src0 = models[0].streamer.source  # both copies: the same pack, arena and reader kind
        reqs = random_requests(src0, blocks, seed)
        calls = [reqs[at : at + batch] for at in range(0, len(reqs), batch)]
        out["io"], out["blocks"] = src0.reader.io, len(reqs)
        for sm in models:  # untimed: each thread's buffer of each staging made and pinned
            for huge in kinds.values():
                _timed_calls(sm.streamer.source, calls, huge)
        for r in range(rounds):
            for copy in (0, 1) if r % 2 == 0 else (1, 0):
                for kind in list(kinds) if r // 2 % 2 == 0 else list(kinds)[::-1]:
                    stats = models[copy].streamer.reader.stats
                    split = stats.split()
                    times = _timed_calls(models[copy].streamer.source, calls, kinds[kind])
                    out["rounds"].append({
                        "round": r, "copy": copy, "staging": kind,
                        "ms_a_call": 1e3 * float(np.mean(times)),
                        "median_ms_a_call": 1e3 * float(np.median(times)),
                        **{f"{name}_ms_a_call": 1e3 * (now - was) / len(calls)
                           for name, was, now in zip(READ_SPLIT, split, stats.split(),
                                                     strict=True)},
                    })  # fmt: skip
        out["staging_huge_pages"] = [sm.streamer.reader.staging_huge_pages for sm in models]
        for sm in models:
            sm.streamer.reader.huge_staging = True
            sm.reset_cache()  # the reads overwrote slots the caches named
    cell = {(x["round"], x["copy"], x["staging"]): x["ms_a_call"] for x in out["rounds"]}

    def median_ratio(top, bottom) -> dict:
        each = [cell[(r, *top)] / cell[(r, *bottom)] for r in range(rounds)]
        return {"median": float(np.median(each)), "each": each}

    out["second_over_first"] = {k: median_ratio((1, k), (0, k)) for k in kinds}
    out["4KiB_over_2MiB"] = {c: median_ratio((c, "4KiB"), (c, "2MiB")) for c in (0, 1)}
    for k, v in out["second_over_first"].items():
        print(f"  copies, staging in {k} pages: second / first {v['median']:.3f} a call "
              f"(rounds {min(v['each']):.3f}-{max(v['each']):.3f})", flush=True)  # fmt: skip
    for c, v in out["4KiB_over_2MiB"].items():
        print(f"  copy {c}: 4 KiB / 2 MiB staging {v['median']:.3f} a call", flush=True)
    return out


def _timed_calls(src, calls: list[list[tuple[int, int, int]]], huge: bool) -> list[float]:
    """Seconds of each of `calls` read into `src`'s slots one after another, staging in 2 MiB
    pages or not (`huge`), once no kernel still reads a slot they overwrite."""
    src.reader.huge_staging = huge
    src.flush()
    times = []
    for reqs in calls:
        t = time.perf_counter()
        src.reader.read(reqs)
        times.append(time.perf_counter() - t)
    return times


def _runs(args, packed: Path, plan: list[tuple], io: str | None, name: str) -> list[dict]:
    """Each (budget, drafter, γ, routing, lookahead) in plan, one loaded model per budget and
    routing; the oracle's reference is that routing's plain run. Records go to DIR/name.jsonl.
    `io` None: the backend's; each row's summary records the io it read with."""
    from specdec.bench.lockstep import warm_up
    from specdec.clock.profiles import get_profile
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    prof = get_profile(args.profile)
    trace = _trace(args)
    rows, sink = [], open(Path(args.out) / f"{name}.jsonl", "a")
    groups: dict = {}
    for budget, drafter, gamma, routing, lookahead in plan:
        groups.setdefault((budget, routing, lookahead), []).append((drafter, gamma))
    for (budget, routing, lookahead), runs in groups.items():
        if time.perf_counter() > args.deadline_at:
            break
        sm = load(packed, budget=budget, io=io, lookahead=lookahead, with_mtp=False)
        given = trace if routing == "trace" else None
        try:
            prompt = sm.encode(PROMPT)
            warm_up(sm, prompt, runs, given)
            reference = None
            for drafter, gamma in runs:
                if time.perf_counter() > args.deadline_at:
                    break
                beside = read_beside(sm)  # the disk's rate this minute; the cache is reset next
                sm.reset_cache()
                res = generate(sm, prompt, drafter, DecodeConfig(gamma, args.tokens), (prof,),
                               stop_at_eos=False, routing=given, reference=reference)  # fmt: skip
                if drafter == "none" and gamma == 1:
                    reference = res.tokens
                _keep(args, rows, sink, name, res, drafter, gamma, budget, beside,
                      routing=routing, lookahead=lookahead)  # fmt: skip
        finally:
            sm.close()
    sink.close()
    return rows


def _trace_dir(args) -> Path:
    """Where `big` writes the calibrated MiniMax trace the runs follow (`--routing trace`)."""
    return Path(args.disk) / "minimax.trace"


def _trace(args):
    from specdec.trace.format import load_trace

    return load_trace(_trace_dir(args))


def _keep(args, rows: list, sink, name: str, res, drafter: str, gamma, budget: str,
          beside: float, **where) -> None:  # fmt: skip
    """A run's row (its summary; `where`: its routing, lookahead and lockstep pair) kept in
    `rows`, its records written to `sink` (one JSONL line a run, in the rows' order), a line of
    it printed; `beside`: read_beside's GB/s before it."""
    s = res.summary
    row = {**s, "budget": budget, "drafter": drafter, "gamma": str(gamma), **where,
           "session": args.session, "read_beside_gbps": beside, "tokens": res.tokens}  # fmt: skip
    rows.append(row)
    args.kept = rows  # the step's runs so far: main keeps them if the step then fails
    sink.write(json.dumps({"run": {k: row[k] for k in list(row)[:6]},
                           "records": [r.__dict__ for r in res.records]}, default=str) + "\n")  # fmt: skip
    sink.flush()
    # the step so far: a lease or a pipeline's limit can end it mid-step (merge_cuda takes it)
    save(Path(args.out), name, {"session": args.session, "partial": True, "runs": rows},
         args.step_t0, done=False)  # fmt: skip
    print(f"  {name} {row['budget']} {row['routing']} {drafter} γ={gamma} "
          f"la={row['lookahead']}{' lockstep ' + str(row['lockstep']) if 'lockstep' in row else ''}: "
          f"{s.get('tokens_per_s') or 0:.2f} tok/s, "
          f"model {s.get('modeled_tokens_per_s/h200') or 0:.2f}", flush=True)  # fmt: skip


def _lockstep_runs(args, packed: Path, runs: list[tuple], name: str) -> list[dict]:
    """--lockstep: at each speculation budget, trace routing, each (drafter, γ) of `runs` in
    lockstep with a plain run of its own on two models loaded at the budget
    (specdec.bench.lockstep `paired_runs`). Rows in pairs, plain then speculative, both with
    `lockstep`: the pair's number; each pair's `read_beside_gbps` read on the speculative
    side's model."""
    from specdec.bench.lockstep import needs_reference, paired_runs, two_models
    from specdec.clock.profiles import get_profile

    prof, trace = get_profile(args.profile), _trace(args)
    rows, sink = [], open(Path(args.out) / f"{name}.jsonl", "a")
    oracle = needs_reference(runs)
    for budget in args.spec_budgets.split(","):
        if time.perf_counter() > args.deadline_at:
            break
        with two_models(packed, budget, io=args.io, with_mtp=False) as models:
            prompt = models[0].encode(PROMPT)
            ref = _reference(args, models[0], prompt, trace) if oracle else None
            pairs = paired_runs(models, prompt, runs, args.tokens, (prof,), trace,
                                before=read_beside, reference=ref)  # fmt: skip
            for pair in pairs:
                for res, d, g in ((pair.plain, "none", 1), (pair.spec, pair.drafter, pair.gamma)):
                    _keep(args, rows, sink, name, res, d, g, budget, pair.before,
                          routing="trace", lookahead=0, lockstep=pair.k)  # fmt: skip
                if time.perf_counter() > args.deadline_at:
                    break
    sink.close()
    return rows


def _reference(args, sm, prompt: list[int], trace) -> list[int]:
    """The oracle's reference for lockstep runs, kept in --disk for the session's later commands
    (lossless streaming: plain greedy tokens are the same at every budget, so one serves all):
    keyed by the pack's content hash, the trace's bytes and the prompt, and used where it is at
    least --tokens long. A 512-token one took about 100 s at 9 GB (thirty-third session)."""
    import hashlib

    from specdec.bench.lockstep import paired_reference

    traced = sorted(f for f in _trace_dir(args).rglob("*") if f.is_file())
    key = hashlib.sha256(
        b"".join([sm.model_hash.encode(), *(f.read_bytes() for f in traced)])
        + json.dumps(prompt).encode()
    ).hexdigest()[:16]
    kept = Path(args.disk) / f"reference-{key}.json"
    if kept.exists() and len(got := json.loads(kept.read_text())) >= args.tokens:
        print(f"  the oracle's reference: {kept.name} ({len(got)} tokens)", flush=True)
        return got[: args.tokens]
    got = paired_reference(sm, prompt, args.tokens, trace)
    write_result(kept, got)
    return got


def scale(args) -> dict:
    packed = Path(args.disk) / "mm16.packed"
    plan = [(b, "none", 1, r, 0) for r in ("model", "trace") for b in BUDGETS]
    return {"runs": _runs(args, packed, plan, args.io, "scale")}


def _against_plain(name: str, args, groups: list[list[tuple]]) -> dict:
    """At each speculation budget, trace routing: a plain run before each group of (drafter, γ)
    runs and one after the last (the first is the oracle's reference): each run's speed-up is
    taken against the plain runs on either side of its group, a minute or less apart, so the
    disk's drift (±20% over minutes on the H200's) moves both sides of the ratio alike."""
    if args.lockstep:
        runs = [run for group in groups for run in group]
        return {"runs": _lockstep_runs(args, Path(args.disk) / "mm16.packed", runs, name)}
    plan = []
    for b in args.spec_budgets.split(","):
        for group in groups:
            plan += [(b, d, g, "trace", 0) for d, g in [("none", 1), *group]]
        plan.append((b, "none", 1, "trace", 0))
    return {"runs": _runs(args, Path(args.disk) / "mm16.packed", plan, args.io, name)}


def spec(args) -> dict:
    alphas = [float(a) for a in args.alphas.split(",")]
    gammas = [int(g) for g in args.gammas.split(",")]
    return _against_plain("spec", args, [[(f"oracle:{a:g}", g) for g in gammas] for a in alphas])


def auto(args) -> dict:
    """`--gamma auto` at each α of --auto-alphas; with --auto-gammas, those fixed γ run in the
    same group (between the same plain runs), so auto is measured against the γ that wins.
    Auto first in each group: a step cut short keeps the run it is for (the thirty-third
    session's 512-token step was cut after its γ = 4 pair, before auto's)."""
    fixed = [int(g) for g in args.auto_gammas.split(",") if g]
    alphas = [float(a) for a in args.auto_alphas.split(",")]
    return _against_plain("auto", args, [[(f"oracle:{a:g}", g) for g in ("auto", *fixed)]
                                         for a in alphas])  # fmt: skip


def drafters(args) -> dict:
    return _against_plain("drafters", args, [[(d, g) for d in ("self", "lookup") for g in (2, 4)]])


def lookahead(args) -> dict:
    packed = Path(args.disk) / "mm16.packed"
    plan = [(b, "none", 1, "model", d) for b in ("10%", "9GB") for d in (0, 1, 2)]
    return {"runs": _runs(args, packed, plan, args.io, "lookahead")}


def shm(args) -> dict:
    from specdec.store.reader import page_cache_io

    packed, fast = Path(args.disk) / "mm16.packed", Path(args.shm) / "mm16.packed"
    if not (fast / "experts.json").exists():
        shutil.copytree(packed, fast)
    plan = [(b, "none", 1, "trace", 0) for b in (ONE_TOKEN, "10%", "9GB")]
    plan += [(b, "oracle:0.8", 4, "trace", 0) for b in (ONE_TOKEN, "10%", "9GB")]
    io = "buffered" if args.io == "direct" else page_cache_io()  # pinned reads tmpfs, unbypassed
    try:
        return {"runs": _runs(args, fast, plan, io, "shm")}
    finally:
        shutil.rmtree(fast, ignore_errors=True)


class CallTimes:
    """Per MoE layer call of a decode: wall seconds in the router's sync, in slot-safety flushes
    (earlier layers' kernels finishing before a read may refill their slots) and in reads (timed
    by specdec.bench.overhead's HostSplit), in the layer's own GPU work (its output evaluated as
    soon as the call returns: the call's fresh blocks land, then its experts compute); the call's
    main-thread CPU, positions and fresh blocks (the cache's misses)."""

    PARTS = ("router", "flush", "reads")

    def __init__(self, streamer):
        from specdec.bench.overhead import HostSplit
        from specdec.store.reader import ExpertReader
        from specdec.stream.source import ExpertSource
        from specdec.stream.streamed import StreamedSwitchGLU
        from specdec.stream.streamer import Streamer

        self.calls: list[dict] = []
        self.split = HostSplit()
        for cls, name, part in zip((Streamer, ExpertSource, ExpertReader),
                                   ("sync", "flush", "read"), self.PARTS, strict=True):  # fmt: skip
            self.split.wrap(cls, name, part)
        self._cls, self._inner = StreamedSwitchGLU, StreamedSwitchGLU.__call__

        def timed(obj, x, indices):
            wall, misses = dict(self.split.wall), streamer.cache.misses
            c, t = time.thread_time(), time.perf_counter()
            y = self._inner(obj, x, indices)
            cpu, t = time.thread_time() - c, time.perf_counter() - t
            g = time.perf_counter()
            mx.eval(y)
            call = {p: self.split.wall[p] - wall.get(p, 0.0) for p in self.PARTS}
            self.calls.append(call | {
                "gpu": time.perf_counter() - g, "cpu": cpu, "wall": t,
                "fresh": streamer.cache.misses - misses, "layer": obj._h.layer,
                "positions": int(np.prod(indices.shape[:-1])),
            })  # fmt: skip
            return y

        StreamedSwitchGLU.__call__ = timed

    def restore(self) -> None:
        self._cls.__call__ = self._inner
        self.split.restore()


def where(args) -> dict:
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    trace = _trace(args)
    out = {}
    for budget in args.spec_budgets.split(","):
        sm = load(Path(args.disk) / "mm16.packed", budget=budget, io=args.io, with_mtp=False)
        try:
            prompt, reference = sm.encode(PROMPT), None
            for drafter, gamma in (("none", 1), ("oracle:1", 8)):
                sm.reset_cache()
                ct = CallTimes(sm.streamer)
                try:
                    res = generate(sm, prompt, drafter, DecodeConfig(gamma, args.tokens),
                                   stop_at_eos=False, routing=trace, reference=reference)  # fmt: skip
                finally:
                    ct.restore()
                reference = reference or res.tokens
                walls = [r.wall_s for r in res.records]
                out[f"{budget} {drafter} γ{gamma}"] = {
                    "committed": res.summary["committed"], "passes": len(res.records),
                    "wall_s": sum(walls), "blocked_s": res.summary["blocked_s"],
                    "first_pass_wall_s": walls[0], "calls": ct.calls,
                    "prefill_calls": len(sm.main_moe_layers),  # the calls before the passes
                }  # fmt: skip
                tot = {k: sum(c[k] for c in ct.calls) for k in ("router", "flush", "reads",
                                                                 "gpu", "cpu", "fresh")}  # fmt: skip
                print(
                    f"  where {budget} {drafter} γ{gamma}: wall {sum(walls):.2f} s, {tot}",
                    flush=True,
                )
        finally:
            sm.close()
    return out


def repeat(args) -> dict:
    """Whether plain greedy decoding repeats itself run to run on this backend (module doc)."""
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import first_departure, generate
    from specdec.stream.loader import load

    def departs(runs: list[list[int]]) -> list[int | None]:
        """Each run's first token unlike the first run's (None: equal throughout)."""
        return [first_departure(r, runs[0]) for r in runs[1:]]

    out: dict = {"tokens": args.tokens, "streamed": {}, "mlx_lm": {}}
    trace = _trace(args)
    for budget in args.repeat_budgets.split(","):
        warm = budget == "100%"
        times = 3 if warm else 2
        sm = load(Path(args.disk) / "mm16.packed", budget=budget, warm=warm, with_mtp=False)
        try:
            prompt, runs = sm.encode(PROMPT), []
            for _ in range(times):
                if time.perf_counter() > args.deadline_at:
                    break
                if not warm:
                    sm.reset_cache()
                res = generate(sm, prompt, "none", DecodeConfig(1, args.tokens),
                               stop_at_eos=False, routing=trace)  # fmt: skip
                runs.append(res.tokens)
                out["streamed"][budget] = {"runs": runs, "departs": departs(runs)}
                print(f"  repeat {budget}: departs at {departs(runs)}", flush=True)
        finally:
            sm.close()
    for key in SMALL:
        src = Path(args.shm) / key
        if not (src / "config.json").exists() or time.perf_counter() > args.deadline_at:
            continue
        sm = load(src, budget="25%", with_mtp=False)  # its tokenizer, as `exact` takes it
        prompt = sm.encode(PROMPT)
        sm.close()
        model = resident(src)
        runs = [reference_greedy(model, prompt, args.tokens) for _ in range(2)]
        out["mlx_lm"][key] = {"runs": runs, "departs": departs(runs)}
        print(f"  repeat mlx-lm {key}: departs at {departs(runs)}", flush=True)
    return out


def forced(args) -> dict:
    """Teacher-forced logits, bit for bit, run against run (module doc)."""
    from specdec.stream.loader import load

    src = Path(args.shm) / "minimax"
    config = json.loads((src / "config.json").read_text())
    seq = forced_sequence(config, args.tokens)
    # MLX reads CUDNN_SDPA once a process (specdec's default "0": its own fixed-order kernel;
    # "1": cuDNN for a single query from 256 keys in bfloat16), so the other setting runs in a
    # child; each part's key names its setting ("_cudnn_sdpa_off" where 0), whichever ran here
    off = cudnn_sdpa() == "0"
    here, child = ("_cudnn_sdpa_off", "") if off else ("", "_cudnn_sdpa_off")
    other = {CUDNN_SDPA: "1" if off else "0"}
    attention = attention_repeats(config, args.tokens)
    attention_child = in_child("attention_repeats", [config, args.tokens], other)
    resident_child = in_child("resident_repeats", [str(src), args.tokens], other)
    res = resident_runs(src, seq)
    sm = load(src, budget="24slots", with_mtp=False)
    try:
        streamed = []
        for _ in range(2):
            sm.reset_cache()
            streamed.append(step_logits(sm.model, seq))
    finally:
        sm.close()
    out = {"tokens": args.tokens, "model": str(src), "streamed_budget": "24slots",
           "cudnn_sdpa": cudnn_sdpa(),  # this process's: the streamed pairs'
           "resident_vs_resident" + here: compare_steps(*res),
           "streamed_vs_streamed": compare_steps(*streamed),
           "streamed_vs_resident": compare_steps(streamed[0], res[0]),
           "resident_vs_resident" + child: resident_child,
           "attention_alone" + here: attention,
           "attention_alone" + child: attention_child}  # fmt: skip
    for k, v in out.items():
        print(f"  forced {k}: {v}", flush=True)
    return out


def forced_sequence(config: dict, tokens: int) -> list[int]:
    """The fixed token sequence `forced` feeds (seeded)."""
    return np.random.default_rng(0).integers(0, config["vocab_size"], tokens).tolist()


def step_logits(model, seq: list[int]) -> np.ndarray:
    """[T, V] float32 logits of each step of `seq`, one token a call, on a fresh KV cache."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    rows = []
    for t in seq:
        y = model(mx.array([[t]]), cache=cache)[0, -1].astype(mx.float32)  # [V]
        rows.append(np.array(y))
    return np.stack(rows)


def resident_runs(src: Path, seq: list[int]) -> list[np.ndarray]:
    """Two runs of mlx-lm's resident model of `src` over `seq` (step_logits)."""
    model = resident(src)
    return [step_logits(model, seq), step_logits(model, seq)]


def resident_repeats(src: str, tokens: int) -> dict:
    """`forced`'s resident pair alone (for a child process: in_child)."""
    config = json.loads((Path(src) / "config.json").read_text())
    return compare_steps(*resident_runs(Path(src), forced_sequence(config, tokens)))


def compare_steps(a: np.ndarray, b: np.ndarray) -> dict:
    """Two runs' outputs [T, N] step by step, bit for bit (no NaN in a random model's): the first
    step that differs (None: none), how many do, the largest difference and where, and in how
    many steps the argmax differs."""
    diff = np.abs(a - b).max(axis=1)  # [T]
    same = (a == b).all(axis=1)  # [T]
    return {"first_step_differing": None if same.all() else int(np.argmin(same)),
            "steps_differing": int((~same).sum()), "largest": float(diff.max()),
            "at_step": int(diff.argmax()),
            "argmax_differs": int((a.argmax(1) != b.argmax(1)).sum())}  # fmt: skip


def attention_repeats(config: dict, steps: int, runs: int = 3) -> dict:
    """Whether mlx-lm's decode attention alone repeats bit for bit: per dtype, `runs` runs of
    `steps` steps, each appending one seeded random key and value to mlx-lm's KVCache and
    attending one seeded random query over it (the model's heads, KV heads and head size):
    each later run's output against the first run's (`compare_steps`)."""
    from mlx_lm.models.base import scaled_dot_product_attention
    from mlx_lm.models.cache import KVCache

    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    dim = config.get("head_dim") or config["hidden_size"] // heads

    def run(dtype) -> np.ndarray:
        """[steps, heads·dim] float32 outputs, one a step."""
        rng, cache, rows = np.random.default_rng(1), KVCache(), []
        for _ in range(steps):
            q, k, v = (mx.array(rng.standard_normal((1, h, 1, dim)).astype(np.float32))
                       .astype(dtype) for h in (heads, kv_heads, kv_heads))  # fmt: skip
            keys, values = cache.update_and_fetch(k, v)  # [1, kv_heads, step + 1, dim]
            o = scaled_dot_product_attention(q, keys, values, cache=cache, scale=dim**-0.5,
                                             mask=None)  # fmt: skip
            rows.append(np.array(o.astype(mx.float32)).ravel())
        return np.stack(rows)

    out = {"steps": steps, "heads": heads, "kv_heads": kv_heads, "head_dim": dim}
    for name, dtype in (("bfloat16", mx.bfloat16), ("float32", mx.float32)):
        first, *later = (run(dtype) for _ in range(runs))
        out[name] = [compare_steps(first, r) for r in later]
    return out


TIE_VOCABS = (129280, 151936, 200064)  # deepseek-v3, qwen3-30b-a3b, minimax-m2.5


def ties(args, vocabs=TIE_VOCABS, rows: int = 8, trials: int = 16) -> dict:
    """Each row of [rows, V] log-probabilities with two equal maxima at seeded places: its pick
    in one call over all rows (a verify pass) against the row alone (one-token decoding) and
    against the lower of the two indices; counts per vocabulary and dtype."""
    from specdec.decode.state import argmax_picks, log_probs

    rng, out = np.random.default_rng(0), {}
    for v in vocabs:
        for dtype in ("bfloat16", "float32"):
            n = same = lowest = 0
            for _ in range(trials):
                raw = (0.5 * rng.normal(size=(1, rows, v)) - 6.0).astype(np.float32)
                tied = np.sort(np.stack([rng.choice(v, 2, replace=False) for _ in range(rows)]))
                raw[0, np.arange(rows)[:, None], tied] = 1.0  # exactly equal in either dtype
                logits = mx.array(raw).astype(getattr(mx, dtype))  # [1, rows, V]
                batched = argmax_picks(log_probs(logits))[0].tolist()  # [rows]
                alone = [
                    argmax_picks(log_probs(logits[:, r : r + 1]))[0].item() for r in range(rows)
                ]
                n += rows
                same += sum(b == a for b, a in zip(batched, alone, strict=True))
                lowest += sum(b == t for b, t in zip(batched, tied[:, 0].tolist(), strict=True))
            out[f"{v}/{dtype}"] = {"rows": n, "as_decoded_alone": same, "lower_index": lowest}
    return {"rows_a_call": rows, "cases": out,
            "all_hold": all(c["rows"] == c["as_decoded_alone"] == c["lower_index"]
                            for c in out.values())}  # fmt: skip


WALL_SIDES = ("ours", "ours_stream", "mlx_lm")  # first_tokens: the order of the first round
FIRST_TOKENS = 20  # first_tokens' least --tokens: the prompt's pick, 16 held, 3 after them


def first_tokens(args) -> dict:
    from specdec.decode.loop import HELD_TOKENS

    out: dict = {"tokens": args.tokens, "first": HELD_TOKENS, "prompt": PROMPT}
    for key in ("qwen3", "minimax"):
        src, runs = str(Path(args.shm) / key), []
        for i in range(args.pairs):
            for side in WALL_SIDES[i % 3 :] + WALL_SIDES[: i % 3]:
                runs.append(in_child("token_walls", [src, args.tokens, side], {}))
        out[key] = {"runs": runs} | {
            side: {
                part: float(np.median([r[part] for r in runs if r["side"] == side]))
                for part in ("first_ms", "rest_ms", "tokens_per_s")
            }
            for side in WALL_SIDES
        }
        _so_far(args, out, key, "first_tokens")
    return out


LOOP_ENVS = ({"MLX_USE_CUDA_GRAPHS": "0"}, {"MLX_CUDA_GRAPH_CACHE_SIZE": "4000"})
LOOP_SUBSET = ["mlx_lm_resident", "mlx_lm_streamed", "ours", "ours_replayed", "decode_held_1",
               "decode_held_64", "bare", "bare_mlx_lm_step"]  # fmt: skip


def loop_parts(args) -> dict:
    from specdec.bench.overhead import PROMPT as LOOP_PROMPT

    out: dict = {"tokens": args.tokens, "rounds": args.pairs, "prompt": LOOP_PROMPT}
    only = args.loop_only.split(",") if args.loop_only else None
    plan = [(key, {}, only) for key in ("qwen3", "minimax")]
    if only is None:
        plan += [("qwen3", env, LOOP_SUBSET) for env in LOOP_ENVS]  # the GPU's graphs, in turn
    for key, env, only in plan:
        name = " ".join([key, *(f"{k}={v}" for k, v in env.items())])
        argv = [str(Path(args.shm) / key), args.tokens, args.pairs, only]
        try:  # each child's figures kept as they come: a failure loses only its own
            out[name] = in_child("loop_parts_child", argv, env)
        except Exception as e:  # noqa: BLE001 -- a fact to report; the next child still runs
            out[name] = {"error": repr(e)[:2000], "env": env}
        _so_far(args, out, name, "loop_parts")
    return out


def loop_parts_child(src: str, tokens: int, rounds: int, only: list[str] | None) -> dict:
    """specdec.bench.loop_parts in a fresh process (`in_child`); the profiles with every
    variant only."""
    from specdec.bench.loop_parts import loop_parts as parts

    return parts(src, tokens, rounds, only, profiles=only is None)


def token_walls(src: str, tokens: int, side: str) -> dict:
    """One fresh process's decode at full budget (`first_tokens`): each token's wall ms after
    the first, the first HELD_TOKENS tokens' mean and the rest's, and tok/s as each side's
    summary counts it."""
    from specdec.decode.loop import HELD_TOKENS, DecodeConfig
    from specdec.decode.run import generate
    from specdec.stream.loader import load, resolve

    if side != "mlx_lm":
        sm = load(src, budget="100%", warm=True, io="buffered")
        own = mx.stream(mx.new_stream(mx.default_device())) if side == "ours_stream" else None
        with own or contextlib.nullcontext():
            res = generate(sm, sm.encode(PROMPT), "none", DecodeConfig(max_tokens=tokens),
                           stop_at_eos=False)  # fmt: skip
        walls = [1e3 * r.wall_s for r in res.records]
    else:
        from mlx_lm.generate import generate_step
        from mlx_lm.utils import load_tokenizer

        path = resolve(src)
        model, prompt = resident(path), load_tokenizer(path).encode(PROMPT)
        at = [time.perf_counter() for _ in generate_step(mx.array(prompt), model,
                                                         max_tokens=tokens)]  # fmt: skip
        walls = list(1e3 * np.diff(at))  # between yields after the first: decode tokens
    first, rest = walls[:HELD_TOKENS], walls[HELD_TOKENS:]
    return {
        "side": side,
        "walls_ms": walls,
        "first_ms": sum(first) / len(first),
        "rest_ms": sum(rest) / len(rest),
        "tokens_per_s": 1e3 * len(walls) / sum(walls),
    }


def in_child(func: str, argv: list, env: dict[str, str]) -> dict:
    """This module's `func(*argv)` (JSON arguments, a dict back) in a child process with `env`
    added to this one's."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import bench_cuda; "
            "print(json.dumps(getattr(bench_cuda, sys.argv[2])(*json.loads(sys.argv[3]))))")  # fmt: skip
    cmd = [sys.executable, "-c", code, str(Path(__file__).parent), func, json.dumps(argv)]
    # a child hung on the GPU would hold the step past any --deadline
    got = subprocess.run(cmd, env=os.environ | env, capture_output=True, text=True, timeout=1800)
    if got.returncode:
        raise RuntimeError(f"{func} with {env} failed: {got.stderr[-2000:]}")
    return json.loads(got.stdout.splitlines()[-1]) | {"env": env}


PRICED = {"scale", "spec", "auto", "drafters", "lookahead", "shm", "pinned"}  # priced runs
STEPS = {
    "check": check,
    "offsets": offsets,
    "models": small_models,
    "exact": exact,
    "overhead": overhead,
    "attention_speed": attention_speed,
    "profile": profile,
    "reads": reads,
    "batches": batches,
    "span": span,
    "pinned": pinned,
    "big": big,
    "scale": scale,
    "spec": spec,
    "auto": auto,
    "copies": copies,
    "drafters": drafters,
    "lookahead": lookahead,
    "shm": shm,
    "where": where,
    "repeat": repeat,
    "forced": forced,
    "ties": ties,
    "first_tokens": first_tokens,
    "loop_parts": loop_parts,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="+", choices=list(STEPS))
    ap.add_argument("--shm", default="/dev/shm/specdec")
    ap.add_argument("--disk", default=str(Path.home() / "specdec-cuda"))
    ap.add_argument("--out", default="benchmarks/results/cuda")
    ap.add_argument("--tokens", type=int, default=20, help="decode tokens per run")
    ap.add_argument(
        "--deadline",
        type=float,
        default=1e9,
        help="seconds: start no step, and no run of a step, after",
    )
    ap.add_argument("--pairs", type=int, default=5, help="overhead: interleaved process pairs")
    ap.add_argument("--spec-budgets", default=",".join(SPEC_BUDGETS), help="spec/auto/drafters")
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)), help="spec: oracle α")
    ap.add_argument("--gammas", default=",".join(map(str, GAMMAS)), help="spec: draft lengths")
    ap.add_argument("--auto-alphas", default="0.5,0.7,0.9", help="auto: oracle α")
    ap.add_argument("--auto-gammas", default="", help="auto: fixed γ run beside it")
    ap.add_argument("--lockstep", action="store_true",
                    help="spec, auto, drafters: each run in lockstep with a plain run of its own "
                         "(specdec.bench.lockstep), not between plain runs")  # fmt: skip
    ap.add_argument("--io", choices=("direct", "pinned"),
                    help="scale, spec, auto, drafters, lookahead, where: the read path (default: "
                    "the backend's, specdec.store.reader.default_io: pinned on CUDA)")  # fmt: skip
    ap.add_argument("--session", type=int, default=1, help="the lent machine's session number")
    ap.add_argument("--repeat-budgets", default="100%,9GB", help="repeat: 100%% runs --warm")
    ap.add_argument("--exact-models", default="",
                    help="exact, overhead: only these (tiny,qwen3,...)")  # fmt: skip
    ap.add_argument("--loop-only", default="", help="loop_parts: only these variants")
    ap.add_argument("--profile", help="the profile runs are priced on (default: the profile "
                    "step's, DIR/h200.yaml)")  # fmt: skip
    args = ap.parse_args()
    args.profile = args.profile or str(Path(args.out) / "h200.yaml")
    priced = sorted(PRICED & set(args.steps))
    if priced and "profile" not in args.steps and not Path(args.profile).exists():
        # refused before any step: a missing profile found after `big` costs minutes of device time
        ap.error(f"the runs of {', '.join(priced)} are priced on {args.profile}, which is absent: "
                 "add the profile step or pass --profile PATH")  # fmt: skip
    if "first_tokens" in args.steps and args.tokens < FIRST_TOKENS:
        # its first HELD_TOKENS decode tokens against the rest: a rest of none compares nothing
        ap.error(f"first_tokens compares the first held batch with the tokens after it: give "
                 f"--tokens >= {FIRST_TOKENS} (got {args.tokens})")  # fmt: skip
    if "loop_parts" in args.steps and args.tokens < FIRST_TOKENS:
        # fewer than one held batch and a few tokens after it never reach a batch's end
        ap.error(f"loop_parts times whole held batches: give --tokens >= {FIRST_TOKENS} "
                 f"(got {args.tokens})")  # fmt: skip
    if "attention_speed" in args.steps and args.tokens < ATTENTION_TOKENS:
        # below 256 keys both settings run MLX's own kernel: the step would compare nothing
        ap.error(f"attention_speed compares cuDNN's attention from 256 keys on: give --tokens "
                 f">= {ATTENTION_TOKENS} (got {args.tokens})")  # fmt: skip
    args.deadline_at = time.perf_counter() + args.deadline
    for d in (args.shm, args.disk, args.out):
        Path(d).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECDEC_CACHE", str(Path(args.disk) / "cache"))
    for step in args.steps:
        if time.perf_counter() > args.deadline_at:
            print(f"[{step}] skipped: past the deadline", flush=True)
            continue
        t0 = args.step_t0 = time.perf_counter()
        args.kept = []  # a run step's runs so far (`_keep`)
        print(f"[{step}] start", flush=True)
        try:
            save(Path(args.out), step, {"session": args.session, **STEPS[step](args)}, t0)
        except Exception as e:  # noqa: BLE001 -- the next steps still run; the failure is kept
            import traceback

            failed = {"error": repr(e), "traceback": traceback.format_exc()}
            runs = {"session": args.session, "runs": args.kept} if args.kept else {}
            save(Path(args.out), step, {**runs, **failed}, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
