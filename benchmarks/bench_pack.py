"""Pack at scale: `specdec pack` against a plain sequential copy of the same bytes, interleaved.

Run from the repo root:

    python benchmarks/bench_pack.py --gb 8 --dir /big/disk      # generates a checkpoint there
    python benchmarks/bench_pack.py --src MODEL_DIR --dir /big/disk   # an existing checkpoint

writes benchmarks/results/pack.json and pack.md. The generated checkpoint has MiniMax-M2.5's
expert shape (hidden 3072, expert intermediate 1536, 256 experts, 4-bit group 64 with bf16
scales and biases: 7.96 MB per expert) plus quantized attention, router and embeddings, as many
layers as fit in --gb, filled with random bytes (real data on the disk, no sparse holes). Each
round runs, in a shuffled order: the pack (in a child process, peak RSS from getrusage), `cp` of
the safetensors files and `dd bs=64M iflag=direct oflag=direct`, each ending with its data
fsynced, each output deleted
before the next run. Before every run the source files' pages are evicted
(posix_fadvise DONTNEED; with --drop-caches also `echo 3 > /proc/sys/vm/drop_caches`), and
the share of them still cached is recorded. The ratio is pack GB/s over the faster copy's GB/s,
per round and as the median of rounds; GB/s counts source bytes. Disk peak: the checkpoint
plus one output.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.bench.read import machine_info  # noqa: E402
from specdec.checkpoint.presets import like_config  # noqa: E402
from specdec.core.files import write_atomic  # noqa: E402
from specdec.pack.pack import weight_files  # noqa: E402
from specdec.store.safetensors import safetensors_header_bytes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HIDDEN, INTER, EXPERTS, VOCAB = 3072, 1536, 256, 200064
HEADS_DIM_Q, HEADS_DIM_KV = 6144, 1024  # MiniMax-M2.5: 48 query heads, 8 KV heads of 128
SHARD_BYTES = 5 << 30
COPIES = ("cp", "dd_direct")  # plain sequential copies; pack is compared to the fastest


def _q4(name: str, out_dim: int, in_dim: int) -> list[tuple[str, str, tuple, int]]:
    """mlx-lm 4-bit group-64 tensors of a linear [out, in] (leading dims folded into out_dim)."""
    return [
        (f"{name}.weight", "U32", (out_dim, in_dim // 8), out_dim * in_dim // 2),
        (f"{name}.scales", "BF16", (out_dim, in_dim // 64), out_dim * in_dim // 32),
        (f"{name}.biases", "BF16", (out_dim, in_dim // 64), out_dim * in_dim // 32),
    ]


def _layer_tensors(layer: int) -> list[tuple[str, str, tuple, int]]:
    p = f"model.layers.{layer}"
    out = []
    for proj, o in [("q_proj", HEADS_DIM_Q), ("k_proj", HEADS_DIM_KV), ("v_proj", HEADS_DIM_KV)]:
        out += _q4(f"{p}.self_attn.{proj}", o, HIDDEN)
    out += _q4(f"{p}.self_attn.o_proj", HIDDEN, HEADS_DIM_Q)
    out.append(
        (f"{p}.block_sparse_moe.gate.weight", "BF16", (EXPERTS, HIDDEN), EXPERTS * HIDDEN * 2)
    )
    for norm in ("input_layernorm", "post_attention_layernorm"):
        out.append((f"{p}.{norm}.weight", "BF16", (HIDDEN,), HIDDEN * 2))
    for proj, o, i in [
        ("gate_proj", INTER, HIDDEN),
        ("up_proj", INTER, HIDDEN),
        ("down_proj", HIDDEN, INTER),
    ]:
        for name, dtype, shape, nbytes in _q4(f"{p}.block_sparse_moe.switch_mlp.{proj}", o, i):
            out.append((name, dtype, (EXPERTS, *shape), EXPERTS * nbytes))
    return out


def _write_random(f, nbytes: int, rng: np.random.Generator, pool: np.ndarray) -> None:
    """nbytes of random-looking data: slices of a random pool at random offsets (cheap to make,
    distinct per 4 KiB, so neither the disk nor a host cache can dedupe or compress it)."""
    chunk = 64 << 20
    while nbytes:
        n = min(chunk, nbytes)
        start = int(rng.integers(0, len(pool) - n))
        f.write(memoryview(pool[start : start + n]))
        nbytes -= n


def write_checkpoint(model_dir: Path, total_gb: float) -> dict:
    """A MiniMax-shaped 4-bit checkpoint of about total_gb, sharded like mlx-lm's (<= 5 GiB)."""
    model_dir.mkdir(parents=True)
    globals_ = _q4("model.embed_tokens", VOCAB, HIDDEN) + _q4("lm_head", VOCAB, HIDDEN)
    globals_.append(("model.norm.weight", "BF16", (HIDDEN,), HIDDEN * 2))
    per_layer = sum(t[3] for t in _layer_tensors(0))
    n_layers = max(1, int((total_gb * 1e9 - sum(t[3] for t in globals_)) // per_layer))
    shards, cur = [], list(globals_)
    for layer in range(n_layers):
        tensors = _layer_tensors(layer)
        if cur and sum(t[3] for t in cur) + per_layer > SHARD_BYTES:
            shards.append(cur)
            cur = []
        cur += tensors
    shards.append(cur)
    rng = np.random.default_rng(0)
    pool = np.frombuffer(rng.bytes(192 << 20), np.uint8)
    for i, entries in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with open(model_dir / name, "wb") as f:
            f.write(safetensors_header_bytes(entries, {"format": "mlx"}))
            _write_random(f, sum(e[3] for e in entries), rng, pool)
            f.flush()
            os.fsync(f.fileno())
    # the preset's full config (pack builds the family's mlx-lm module tree to find the experts)
    config = {
        **like_config("minimax-m2.5", n_layers, EXPERTS, VOCAB),
        "quantization": {"group_size": 64, "bits": 4},
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=1))
    return {"layers": n_layers, "experts": EXPERTS, "generated": True}


def describe(model_dir: Path) -> dict:
    """Layer and expert counts of an existing checkpoint, from its config.json."""
    config = json.loads((model_dir / "config.json").read_text())
    experts = config.get("num_local_experts") or config.get("n_routed_experts")
    return {"layers": config.get("num_hidden_layers"), "experts": experts, "generated": False}


def evict(files: list[Path], drop_caches: bool) -> float:
    """Evict the files' pages; returns the share of their bytes still in the page cache."""
    if drop_caches:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not shutil.which("fincore"):
        return float("nan")
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(x) for x in out.split()) / sum(f.stat().st_size for f in files)


def child(model_dir: str, out_dir: str) -> None:
    from specdec.pack.pack import pack

    t0 = time.perf_counter()
    pack(model_dir, out_dir)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak}))


def run_pack(src: Path, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(src), str(out)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"pack failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_copy(tool: str, files: list[Path], out: Path) -> dict:
    """A plain sequential copy of `files` into out/, data fsynced before the clock stops."""
    out.mkdir()
    t0 = time.perf_counter()
    for f in files:
        dst = out / f.name
        if tool == "cp":
            subprocess.run(["cp", str(f), str(dst)], check=True)
            subprocess.run(["sync", "--data", str(dst)], check=True)
        else:
            cmd = ["dd", f"if={f}", f"of={dst}", "bs=64M", "iflag=direct", "oflag=direct"]
            subprocess.run([*cmd, "conv=fsync", "status=none"], check=True)
    return {"seconds": time.perf_counter() - t0}


def summarize(runs: dict[str, list[dict]], nbytes: int) -> dict:
    gbps = {job: [nbytes / r["seconds"] / 1e9 for r in rs] for job, rs in runs.items()}
    rounds = len(runs["pack"])
    per_round = [gbps["pack"][i] / max(gbps[c][i] for c in COPIES) for i in range(rounds)]
    return {
        "gbps_median": {job: statistics.median(v) for job, v in gbps.items()},
        "gbps_runs": gbps,
        "pack_over_best_copy_per_round": per_round,
        "pack_over_best_copy_median": statistics.median(per_round),
        "peak_rss_bytes_max": max(r["peak_rss_bytes"] for r in runs["pack"]),
        "source_cached_share_before_runs": [r["cached_share"] for rs in runs.values() for r in rs],
    }


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [
        f"# Pack vs sequential copy ({result['checkpoint_bytes'] / 1e9:.2f} GB, "
        f"{result['layers']} layers, {result['rounds']} interleaved rounds)",
        "",
        "| job | median GB/s | runs GB/s |",
        "|---|---:|---|",
    ]
    for job, v in s["gbps_runs"].items():
        runs = ", ".join(f"{x:.2f}" for x in v)
        lines.append(f"| {job} | {s['gbps_median'][job]:.2f} | {runs} |")
    ratios = ", ".join(f"{x:.2f}" for x in s["pack_over_best_copy_per_round"])
    lines += [
        "",
        f"pack / faster copy: median {s['pack_over_best_copy_median']:.2f} (per round {ratios}); "
        f"pack peak RSS {s['peak_rss_bytes_max'] / 1e6:.0f} MB; source pages cached before "
        f"runs: max {max(s['source_cached_share_before_runs']):.1%}; drop_caches: "
        f"{result['drop_caches']}; load average at the end {result['machine']['loadavg_1_5_15']}.",
        "",
        f"Command: `{result['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=8.0, help="size of the generated checkpoint")
    parser.add_argument("--src", type=Path, default=None, help="pack this checkpoint instead")
    parser.add_argument("--dir", type=Path, required=True, help="work directory on the disk")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drop-caches", action="store_true", help="also drop all caches (root)")
    parser.add_argument("--keep-src", action="store_true", help="keep a generated checkpoint")
    args = parser.parse_args()
    work = args.dir / f"bench-pack-{os.getpid()}"
    work.mkdir(parents=True)
    src = args.src or work / "model"
    try:
        shape = write_checkpoint(src, args.gb) if args.src is None else describe(src)
        files = weight_files(src)
        nbytes = sum(f.stat().st_size for f in files)
        runs: dict[str, list[dict]] = {job: [] for job in ("pack", *COPIES)}
        rng = np.random.default_rng(0)
        for _ in range(args.rounds):
            for job in rng.permutation(list(runs)).tolist():
                cached = evict(files, args.drop_caches)
                out = work / "out"
                r = run_pack(src, out) if job == "pack" else run_copy(job, files, out)
                shutil.rmtree(out)
                runs[job].append({**r, "cached_share": cached})
                print(f"{job}: {nbytes / r['seconds'] / 1e9:.2f} GB/s", flush=True)
        result = {
            **shape,
            "checkpoint_bytes": nbytes,
            "rounds": args.rounds,
            "drop_caches": args.drop_caches,
            "command": "python benchmarks/bench_pack.py "
            + ("--src MODEL_DIR " if args.src else f"--gb {args.gb} ")
            + f"--rounds {args.rounds}"
            + (" --drop-caches" if args.drop_caches else ""),
            "summary": summarize(runs, nbytes),
            "runs": runs,
            "machine": {**machine_info(args.dir), "bench_dir": "DIR"},
        }
    finally:
        shutil.rmtree(work / "out" if args.src is None and args.keep_src else work, True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name, text in [
        ("pack.json", json.dumps(result, indent=1) + "\n"),
        ("pack.md", markdown(result)),
    ]:
        write_atomic(RESULTS / name, text)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
