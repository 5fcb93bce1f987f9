"""Pack memory bound: packs a synthetic multi-GB checkpoint and records peak RSS and speed.

Run: `python benchmarks/bench_pack.py [--gb 4] [--dir DIR]` from the repo root; writes
benchmarks/results/pack.json. The checkpoint is mlx-lm-shaped (stacked bf16 `switch_mlp`
experts [E, out, in] per layer plus resident tensors) and written sparse (its bytes are zeros,
so creating it costs no disk writes); pack then really reads it and really writes experts.bin and
resident.safetensors. The claim checked: peak RSS stays near one expert block plus the 8 MiB
copy buffer, whatever the checkpoint size, so a 100 GB checkpoint packs on a 24 GB machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.store.files import durable_replace  # noqa: E402
from specdec.store.layout import safetensors_header_bytes  # noqa: E402
from specdec.store.readbench import machine_info  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "pack.json"
HIDDEN, INTER, EXPERTS = 2048, 1536, 64  # per expert: 3 bf16 projections of 6.3 MB


def write_sparse_checkpoint(model_dir: Path, total_gb: float) -> dict:
    """model.safetensors of about total_gb, sparse (holes read as zeros)."""
    expert_bytes = 3 * HIDDEN * INTER * 2
    n_layers = max(1, int(total_gb * 1e9 // (expert_bytes * EXPERTS)))
    entries = [("model.embed_tokens.weight", "BF16", (32000, HIDDEN), 32000 * HIDDEN * 2)]
    for layer in range(n_layers):
        p = f"model.layers.{layer}"
        entries.append(
            (f"{p}.self_attn.q_proj.weight", "BF16", (HIDDEN, HIDDEN), HIDDEN * HIDDEN * 2)
        )
        for proj, shape in [
            ("gate_proj", (EXPERTS, INTER, HIDDEN)),
            ("up_proj", (EXPERTS, INTER, HIDDEN)),
            ("down_proj", (EXPERTS, HIDDEN, INTER)),
        ]:
            entries.append(
                (f"{p}.mlp.switch_mlp.{proj}.weight", "BF16", shape, EXPERTS * INTER * HIDDEN * 2)
            )
    header = safetensors_header_bytes(entries, {"format": "mlx"})
    path = model_dir / "model.safetensors"
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + sum(e[3] for e in entries))
    (model_dir / "config.json").write_text(json.dumps({"model_type": "synthetic"}))
    return {"layers": n_layers, "experts": EXPERTS, "checkpoint_bytes": path.stat().st_size}


def child(model_dir: str, out_dir: str) -> None:
    from specdec.store.pack import pack

    t0 = time.perf_counter()
    pack(model_dir, out_dir)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (
        1 if sys.platform == "darwin" else 1024
    )
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak}))


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.0, help="checkpoint size")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (real disk)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="specdec-bench-pack-", dir=args.dir))
    try:
        (work / "model").mkdir()
        shape = write_sparse_checkpoint(work / "model", args.gb)
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(work / "model"), str(work / "packed")],
            capture_output=True,
            text=True,
            check=True,
        )
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        result = {
            **shape,
            **run,
            "gbps": shape["checkpoint_bytes"] / run["seconds"] / 1e9,
            "expert_block_bytes": 3 * HIDDEN * INTER * 2,
            "experts_bin_bytes": (work / "packed" / "experts.bin").stat().st_size,
            "machine": machine_info(work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULT.with_name(RESULT.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    durable_replace(tmp, RESULT)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    print(f"wrote {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
