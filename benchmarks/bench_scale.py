"""Real-scale benchmark: real-shape checkpoints decode losslessly at every budget; where time goes.

Run (from the repo root; needs ~10 GB of free disk under ROOT, plus 4.1 GB per --big-layers
layer at the peak (source + packed copy); on a shared 2-core CPU each decoded token takes
seconds per MoE layer, almost all of it MLX's bf16 quantized matmuls):

    python benchmarks/bench_scale.py --root /big/disk/scale --tokens 6 --steps view,small
    python benchmarks/bench_scale.py --root /big/disk/scale --tokens 4 --steps big --big-layers 6

Steps, each in a fresh process (so every peak RSS is that run's own):
  1. `specdec make-random --like minimax-m2.5 --layers 2` (~4 GB) and `specdec pack`; the peak RSS
     of both, and the next-token routing overlap the random routers give.
  2. mlx-lm's own greedy tokens on that checkpoint (resident), then `specdec generate` at budgets
     5%, 25%, 3GB and 100% and every drafter (self, lookup, oracle:0.9, draft:<tiny random
     minimax>) at gamma 2 and 4 on 25%: tokens must equal mlx-lm's.
  3. The --big-layers N-layer MiniMax shape (~2 GB per layer: with 6 layers, more than a
     9 GB cache holds). Packed, then its source deleted (disk). Streamed at
     9GB and 3GB (and 3GB with router lookahead 1, whose reads overlap compute), lookup at
     gamma 4 and self at gamma 2 on 9GB: tokens compared across all of them (mlx-lm is not
     run here: the point is a model larger than the cache), with the time split per token.
  4. `specdec bench read` at the checkpoint's block size: the read path's own GB/s, to set the
     misses' effective GB/s against.
  5. capacity (`--steps capacity --capacity-layers 16 --capacity-budget 9GB [--src-root RAMDISK]`):
     the 16-layer MiniMax shape (34 GB, 33 GB of routed experts: a 9 GB cache holds 28%),
     mlx-lm and `specdec generate --budget 9GB` side by side (two fresh processes at once):
     equal tokens, RSS bound, evictions. `--tokens 0 --keep` only makes and packs (reused
     by the next call). Needs ~70 GB of disk for source + pack, or the source
     on a RAM disk (--src-root /dev/shm) and ~110 GB of RAM for it and mlx-lm's resident copy.
  0. gather_qmm on the arena's row views vs the flat as_strided views it used to build.
Writes benchmarks/results/scale.json (with the machine and its load: the machine is shared).
Checks, per run: peak RSS <= arena + resident weights + 1 GB.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.blas import ensure_fast_blas  # noqa: E402
from specdec.core.machine import machine_info, write_result  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "scale.json"
PROMPT = "def f(x):"
SPECDEC = [sys.executable, "-m", "specdec"]


def child(argv: list[str]) -> tuple[str, int]:
    """Run argv in a fresh process: (its stdout, its own peak RSS in bytes, from wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{' '.join(argv)[:300]} failed:\n{err.read()[-2000:]}")
        peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        return out.read(), peak


def specdec(*args: str) -> tuple[str, int]:
    return child([*SPECDEC, *args])


def python(code: str) -> tuple[str, int]:
    return child([sys.executable, "-c", code])


def resident_bytes(packed: Path) -> int:
    return sum(f.stat().st_size for f in packed.glob("model*.safetensors"))


def generate(
    packed: Path,
    budget: str,
    tokens: int,
    drafter: str = "none",
    gamma: int = 1,
    ahead: int = 0,
    prompt: str = PROMPT,
) -> dict:
    out, peak = specdec(
        "generate", "--model", str(packed), "--budget", budget, "--prompt", prompt,
        "--max-tokens", str(tokens), "--drafter", drafter, "--gamma", str(gamma), "--json",
        "--lookahead", str(ahead),
    )  # fmt: skip
    res = json.loads(out.splitlines()[-1])
    s = res["stats"]
    limit = s["arena_bytes"] + resident_bytes(packed) + 2**30
    row = {
        "budget": budget,
        "drafter": drafter,
        "gamma": gamma,
        "lookahead": ahead,
        "tokens": res["tokens"],
        "peak_rss_gib": round(peak / 2**30, 2),
        "rss_limit_gib": round(limit / 2**30, 2),
        "rss_ok": peak <= limit,
        **{k: s.get(k) for k in ("cache_slots", "holds_all_experts", "hit_rate", "tokens_per_s")},
        "bytes_per_token_mb": round(s["bytes_per_token"] / 1e6, 1),
        "per_token_ms": {k: round(v, 1) for k, v in s["per_token_ms"].items()},
        "miss_gb_per_s": s["miss_gb_per_s"] and round(s["miss_gb_per_s"], 2),
        "acceptance": s.get("acceptance"),
        "arena_huge_pages": s.get("arena_huge_pages"),
        "cache_counters": s.get("cache_counters"),
        "prefill_s": s.get("prefill_s") and round(s["prefill_s"], 1),
    }
    print(json.dumps(row), flush=True)
    return row


REFERENCE = """
import json, mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load
model, tok = load({src!r})
prompt = tok.encode({prompt!r}, add_special_tokens=False)
print(json.dumps([int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens={n})]))
"""

OVERLAP = """
import json, numpy as np
from specdec.stream.loader import load
from specdec.decode.run import generate
from specdec.decode.loop import DecodeConfig
sm = load({packed!r}, budget="100%")
seen = {{}}
sm.streamer.log.observers.append(lambda layer, idx, phase: phase == "verify" and seen.setdefault(layer, []).append(set(idx.reshape(-1).tolist())))
generate(sm, sm.encode({prompt!r}), "none", DecodeConfig(1, {n}))
k, e = sm.top_k, sm.streamer.index.layers[sm.main_moe_layers[0]].n_experts
pairs = [len(a & b) / k for rows in seen.values() for a, b in zip(rows, rows[1:])]
print(json.dumps({{"next_token_overlap": float(np.mean(pairs)), "random": k / e, "pairs": len(pairs)}}))
"""


def read_bench(root: Path, block_bytes: int) -> dict:
    out, _ = specdec(
        "bench", "read", "--json", "--dir", str(root), "--block-bytes", str(block_bytes),
        "--file-bytes", str(2 << 30), "--threads", "1", "8", "--rounds", "3",
    )  # fmt: skip
    rows = json.loads(out)
    best = {
        f"threads_{r['threads']}": r["gbps"]
        for r in rows["paths"]
        if r["name"] == "preadv_direct_arena"
    }
    return {"block_bytes": block_bytes, "preadv_direct_arena_gb_per_s": best, "raw": rows}


def view_cost(repeats: int = 7, calls: int = 10) -> dict:
    """gather_qmm on the arena's dense per-tensor views against the strided views of an array of
    slots (the layout before: one row per slot, each tensor a column slice of the rows), on the
    same bytes, interleaved: one MiniMax gate projection, 8 of 32 slots."""
    import mlx.core as mx

    from specdec.bench.device import slot_row_views
    from specdec.store.arena import Arena
    from specdec.store.layout import ALIGN, TensorSpec

    h, i, n = 3072, 1536, 32
    specs = [
        TensorSpec("g.weight", "U32", (i, h // 8), 0, i * h // 2),
        TensorSpec("g.scales", "BF16", (i, h // 64), i * h // 2, i * h // 32),
        TensorSpec("g.biases", "BF16", (i, h // 64), i * h // 2 + i * h // 32, i * h // 32),
    ]
    slot = -(-(i * h // 2 + i * h // 16) // ALIGN) * ALIGN
    arena = Arena(n, slot, specs)
    dense = [arena.tensor_view(t) for t in specs]
    rows_buf = mx.zeros((n, slot), dtype=mx.uint8)  # [slots, block]: the array of slots
    mx.eval(rows_buf)
    strided = slot_row_views(rows_buf, specs)
    rng = np.random.default_rng(0)
    scale = np.array(mx.full((i * h // 64,), 0.01, mx.bfloat16).view(mx.uint8))
    bias = np.array(mx.full((i * h // 64,), -0.08, mx.bfloat16).view(mx.uint8))
    codes = rng.integers(0, 256, i * h // 2, dtype=np.uint8)
    block = np.concatenate(
        [codes, scale, bias, np.zeros(slot - i * h // 2 - i * h // 16, np.uint8)]
    )
    rows_np = np.array(rows_buf, copy=False)
    for s in range(n):
        rows_np[s] = block
        at = 0
        for piece in arena.segments(s):
            piece[:] = block[at : at + len(piece)]
            at += len(piece)
    idx = mx.array(rng.choice(n, 8, replace=False).reshape(1, 1, 8))
    out = {}
    for dtype in ("float32", "bfloat16"):
        x = mx.array(rng.standard_normal((1, 1, 8, 1, h)), dtype=getattr(mx, dtype))
        ts: dict[str, list[float]] = {"dense": [], "strided": []}
        results = {}
        for _ in range(repeats):
            for name, v in (("dense", dense), ("strided", strided)):
                t0 = time.perf_counter()
                for _ in range(calls):
                    y = mx.gather_qmm(x, *v, rhs_indices=idx, transpose=True, group_size=64, bits=4)
                    mx.eval(y)
                ts[name].append((time.perf_counter() - t0) / calls)
                results[name] = np.array(y.astype(mx.float32))
        d, st = float(np.median(ts["dense"])), float(np.median(ts["strided"]))
        out[dtype] = {
            "dense_ms": round(1e3 * d, 2),
            "strided_ms": round(1e3 * st, 2),
            "ratio": round(d / st, 3),
            "equal": bool(np.array_equal(results["dense"], results["strided"])),
        }
    print("view cost:", json.dumps(out), flush=True)
    return out


def small_model(root: Path, tokens: int) -> dict:
    src, packed, draft = root / "mm2", root / "mm2.packed", root / "draft-minimax"
    out = {"max_tokens": tokens}
    _, peak = specdec("make-random", "--like", "minimax-m2.5", "--layers", "2", str(src))
    out["make_random_peak_rss_mb"] = peak // 2**20
    _, peak = specdec("pack", str(src), str(packed), "--force")
    out["pack_peak_rss_mb"] = peak // 2**20
    specdec("make-random", "minimax", str(draft), "--quantize", "4")
    ref_out, ref_peak = python(REFERENCE.format(src=str(src), prompt=PROMPT, n=tokens))
    ref = json.loads(ref_out.splitlines()[-1])
    out["mlx_lm"] = {"tokens": ref, "peak_rss_gib": round(ref_peak / 2**30, 2)}
    print("mlx-lm:", ref, flush=True)
    ov, _ = python(OVERLAP.format(packed=str(packed), prompt=PROMPT, n=max(tokens, 16)))
    out["routing"] = json.loads(ov.splitlines()[-1])
    runs = [generate(packed, b, tokens) for b in ("5%", "25%", "3GB", "100%")]
    for gamma in (2, 4):
        for d in ("self", "lookup", "oracle:0.9", f"draft:{draft}"):
            runs.append(generate(packed, "25%", tokens, d, gamma))
    for r in runs:
        r["equals_mlx_lm"] = r["tokens"] == ref
    out["runs"] = runs
    out["block_bytes"] = json.loads((packed / "experts.json").read_text())["slot_bytes"]
    return out


def big_model(root: Path, layers: int, tokens: int) -> dict:
    src, packed = root / f"mm{layers}", root / f"mm{layers}.packed"
    out = {"layers": layers, "max_tokens": tokens, "machine": machine_info()}
    _, peak = specdec("make-random", "--like", "minimax-m2.5", "--layers", str(layers), str(src))
    out["make_random_peak_rss_mb"] = peak // 2**20
    out["source_gb"] = round(sum(f.stat().st_size for f in src.iterdir()) / 1e9, 1)
    _, peak = specdec("pack", str(src), str(packed), "--force")
    out["pack_peak_rss_mb"] = peak // 2**20
    shutil.rmtree(src)  # disk: the packed copy holds everything decode needs
    runs = [generate(packed, "9GB", tokens), generate(packed, "3GB", tokens)]
    runs.append(generate(packed, "3GB", tokens, ahead=1))  # reads overlapped with compute
    runs += [
        generate(packed, "9GB", tokens, "lookup", 4),
        generate(packed, "9GB", tokens, "self", 2),
    ]
    for r in runs:
        r["equals_9gb_plain"] = r["tokens"] == runs[0]["tokens"]
    out["runs"] = runs
    return out


def capacity_model(
    root: Path, src_root: Path, layers: int, tokens: int, budget: str, prompt: str
) -> dict:
    """The question's capacity run: an N-layer MiniMax shape whose routed experts are several
    times the budget; mlx-lm (resident, from the source) and `specdec generate --budget` run
    at the same time, each in a fresh process (each one's own peak RSS; each computes on its
    own cores where the machine has them). Tokens must be equal; how full the cache got is in
    `cache_counters` (evictions > 0: the budget was filled and recycled)."""
    src, packed = src_root / f"mm{layers}", root / f"mm{layers}.packed"
    out = {"layers": layers, "budget": budget, "max_tokens": tokens, "prompt": prompt}
    out["machine"] = machine_info()
    # --keep'd checkpoints from an earlier call are reused (a lent machine's calls are short)
    if not (src / "config.json").exists():
        cmd = ("make-random", "--like", "minimax-m2.5", "--layers", str(layers), str(src))
        out["make_random_peak_rss_mb"] = specdec(*cmd)[1] // 2**20
    out["source_gb"] = round(sum(f.stat().st_size for f in src.iterdir()) / 1e9, 1)
    if not (packed / "experts.json").exists():
        t0 = time.perf_counter()
        _, peak = specdec("pack", str(src), str(packed), "--force")
        out["pack_s"], out["pack_peak_rss_mb"] = round(time.perf_counter() - t0, 1), peak // 2**20
    if tokens == 0:
        return out  # prepared only
    index = json.loads((packed / "experts.json").read_text())
    out["expert_gb"] = round((packed / "experts.bin").stat().st_size / 1e9, 1)
    with cf.ThreadPoolExecutor(2) as pool:
        ref = pool.submit(python, REFERENCE.format(src=str(src), prompt=prompt, n=tokens))
        ours = pool.submit(generate, packed, budget, tokens, prompt=prompt)
        ref_out, ref_peak = ref.result()
        run = ours.result()
    out["mlx_lm"] = {"tokens": json.loads(ref_out.splitlines()[-1]), "peak_rss_gib": ref_peak}
    out["mlx_lm"]["peak_rss_gib"] = round(ref_peak / 2**30, 2)
    run["equals_mlx_lm"] = run["tokens"] == out["mlx_lm"]["tokens"]
    run["cache_share_of_experts"] = round(
        run["cache_slots"] * index["slot_bytes"] / (packed / "experts.bin").stat().st_size, 3
    )
    out["runs"] = [run]
    return out


def save(result: dict, root: Path) -> None:
    """Write what is measured so far (merged into the file: each --steps run adds its parts).
    Paths under --root are written as ROOT: results never name the machine's directories."""
    old = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, {**old, **result}, {root: "ROOT"})


def main() -> int:
    ensure_fast_blas()  # children inherit it: mlx-lm and specdec compute under the same BLAS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="scratch dir for checkpoints")
    parser.add_argument("--tokens", type=int, default=6, help="greedy tokens per run")
    parser.add_argument("--big-layers", type=int, default=6, help="layers of the big model")
    parser.add_argument(
        "--steps", default="view,small,big", help="which of view, small, big (merged into the file)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints under --root")
    parser.add_argument("--prompt", default=PROMPT, help="capacity step's prompt")
    parser.add_argument("--capacity-layers", type=int, default=16, help="capacity step's layers")
    parser.add_argument("--capacity-budget", default="9GB", help="capacity step's budget")
    parser.add_argument(
        "--src-root", type=Path, help="capacity step: where the source checkpoint goes (a RAM "
        "disk where --root cannot hold source and pack); default --root",
    )  # fmt: skip
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    result = {"prompt": PROMPT, "machine": machine_info()}
    try:
        steps = args.steps.split(",")
        if "view" in steps:
            result["view_cost"] = view_cost()
            save(result, args.root)
        if "small" in steps:
            result["small"] = small_model(args.root, args.tokens)
            save(result, args.root)
            result["read_bench"] = read_bench(args.root, result["small"]["block_bytes"])
            save(result, args.root)
        if "big" in steps:
            result["big"] = big_model(args.root, args.big_layers, args.tokens)
            save(result, args.root)
        if "capacity" in steps:
            src_root = args.src_root or args.root
            src_root.mkdir(parents=True, exist_ok=True)
            result["capacity"] = capacity_model(
                args.root,
                src_root,
                args.capacity_layers,
                args.tokens,
                args.capacity_budget,
                args.prompt,
            )
            save(result, args.root)
    finally:
        if not args.keep:
            for p in {*args.root.iterdir(), *((args.src_root or args.root).glob("mm*"))}:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    parts = ("small", "big", "capacity")
    runs = [r for part in parts if part in result for r in result[part].get("runs", [])]
    ok = [r.get("equals_mlx_lm", r.get("equals_9gb_plain")) and r["rss_ok"] for r in runs]
    print(
        f"{sum(ok)}/{len(ok)} runs lossless within their RSS bound; " * bool(ok) + f"wrote {RESULT}"
    )
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
