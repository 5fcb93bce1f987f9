"""`specdec verify PACKED_DIR`: check a packed directory end to end.

Every byte the pack wrote is checked: experts.json is loaded and validated (offsets aligned and
in range, no two blocks on one region, dtypes and quantization consistent), and agrees with
config.json (the MoE layers and expert shapes mlx-lm builds from it: pack/agree.py); the
resident files the index records (model.safetensors, mtp.safetensors if packed) are present,
no other safetensors file is, each header parses strictly and lists the recorded tensors, and
every tensor's crc32 matches the one pack recorded; then every expert block is read (in batches
of up to 64 blocks and 256 MiB, so blocks of any size fit; `--io direct` by default, so a
damaged disk is not masked by a good copy in the page cache) and its crc32 compared. Exit 0 with
one `ok:` line, or exit 2 with one line naming the first problem and the fix.

What it cannot see: a checkpoint that was already corrupt when packed (safetensors files carry
no checksums, so pack copies what it reads; the strict header parse is all it checks there).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.checkpoint.config_check import check_quantized
from specdec.core.errors import SpecdecError, StoreError
from specdec.core.progress import progress
from specdec.pack.agree import check_against_config
from specdec.store.arena import Arena
from specdec.store.layout import RESIDENT, ExpertIndex
from specdec.store.pools import members, pool_index
from specdec.store.reader import ExpertReader
from specdec.store.safetensors import SafeTensor, read_safetensors_header

READ = 32 << 20  # bytes per read of a resident tensor
BATCH = 64
BATCH_BYTES = 256 << 20  # the arena verify reads into: small next to memory, whatever the blocks


@dataclass(frozen=True)
class VerifyReport:
    blocks: int
    layers: int
    expert_bytes: int
    resident_tensors: int


def verify(
    packed_dir: str | Path, io: str = "direct", threads: int = 4, sample: int | None = None
) -> VerifyReport:
    """Raise StoreError at the first problem; return what was checked.

    sample=n checks the crc32 of only n blocks per layer, spread evenly (first and last
    included), and of no resident tensor (their headers still): the quick check `specdec pack`
    runs before keeping an existing pack.
    """
    packed_dir = Path(packed_dir)
    if not packed_dir.is_dir():
        what = (
            "a file, not a packed directory" if packed_dir.exists() else "no such packed directory"
        )
        raise StoreError(f"{packed_dir}: {what}; create one with `specdec pack MODEL_DIR OUT_DIR`")
    index = ExpertIndex.load(packed_dir)
    if not (packed_dir / "config.json").is_file():
        raise StoreError(f"{packed_dir}/config.json missing; re-pack with `specdec pack`")
    resident = verify_resident(packed_dir, index, crc=sample is None)
    try:
        config = _read_config(packed_dir)
        names = [t.name for ts in index.resident.values() for t in ts]
        check_quantized(config, names, f"{packed_dir}/config.json")
        check_against_config(packed_dir, config, index)
    except SpecdecError as e:
        raise StoreError(str(e)) from None
    total = 0
    # a mixed pack (two block sizes) is checked one precision at a time (store/pools.py)
    for cold in (False, True) if index.mixed else (None,):
        view = index if cold is None else pool_index(index, cold)
        mask = {lid: members(ly, bool(cold)) for lid, ly in index.layers.items()}
        total += _verify_blocks(packed_dir, view, io, threads, sample, mask)
    return VerifyReport(index.n_blocks, len(index.layers), total, resident)


def _read_config(packed_dir: Path) -> dict:
    try:
        config = json.loads((packed_dir / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise StoreError(
            f"{packed_dir}/config.json: unreadable ({e}); re-pack with `specdec pack`"
        ) from None
    if not isinstance(config, dict):
        raise StoreError(
            f"{packed_dir}/config.json is not a JSON object; re-pack with `specdec pack`"
        )
    return config


def verify_resident(packed_dir: Path, index: ExpertIndex, crc: bool) -> int:
    """The recorded resident files are there, and only they, with the recorded tensors (and,
    with crc, their bytes); returns how many tensors."""
    if RESIDENT not in index.resident:
        raise StoreError(
            f"{packed_dir}/experts.json records no {RESIDENT}; re-pack with `specdec pack --force`"
        )
    present = {p.name for p in packed_dir.glob("*.safetensors")}
    for name in sorted(index.resident.keys() - present):
        raise StoreError(
            f"{packed_dir}/{name} missing (the index records it); re-pack with "
            "`specdec pack --force`"
        )
    for name in sorted(present - index.resident.keys()):
        raise StoreError(
            f"{packed_dir}/{name}: a safetensors file pack did not write (the index does not "
            "record it); remove it, or re-pack with `specdec pack --force`"
        )
    n = 0
    for name, record in sorted(index.resident.items()):
        path = packed_dir / name
        tensors = read_safetensors_header(path)[0]
        got = [(t.name, t.dtype, list(t.shape)) for t in tensors]
        want = [(t.name, t.dtype, list(t.shape)) for t in record]
        if got != want:
            diff = next(
                (
                    f"tensor {g[0]} is {g[1]} {g[2]} where pack wrote {w[0]} {w[1]} {w[2]}"
                    for g, w in zip(got, want, strict=False)
                    if g != w
                ),
                f"{len(got)} tensors where pack wrote {len(want)}",
            )
            raise StoreError(
                f"{path}: header changed since packing ({diff}); re-pack with "
                "`specdec pack --force`"
            )
        for t, r in zip(tensors, record, strict=True) if crc else ():
            if _crc32(t) != r.crc32:
                raise StoreError(
                    f"{path}: tensor {t.name} fails its crc32 check (file corrupt); re-pack "
                    "with `specdec pack --force`"
                )
        n += len(tensors)
    return n


def _crc32(t: SafeTensor) -> int:
    """crc32 of one tensor's bytes, read in READ-sized pieces."""
    value = 0
    fd = os.open(t.path, os.O_RDONLY)
    try:
        for pos in range(t.offset, t.offset + t.nbytes, READ):
            n = min(READ, t.offset + t.nbytes - pos)
            data = os.pread(fd, n, pos)
            if len(data) != n:
                raise StoreError(f"{t.path}: truncated while verifying; re-pack")
            value = zlib.crc32(data, value)
    finally:
        os.close(fd)
    return value


def _verify_blocks(packed_dir, index, io, threads, sample, mask: dict) -> int:
    """crc32 of the blocks of `index` that `mask` ({layer: [E] bool}) selects."""
    widest = max(ly.n_experts for ly in index.layers.values())
    batch = max(1, min(BATCH, BATCH_BYTES // index.slot_bytes, widest))
    arena = Arena(batch, index.slot_bytes)
    with ExpertReader(packed_dir, index, arena, io=io, threads=threads) as reader:
        for lid in progress(index.layer_ids, desc="verify", unit="layer"):
            layout = index.layers[lid]
            chosen = np.flatnonzero(mask[lid]).tolist()
            chosen = [chosen[i] for i in _sampled(len(chosen), sample)]
            for first in range(0, len(chosen), batch):
                experts = chosen[first : first + batch]
                reader.read([(lid, e, i) for i, e in enumerate(experts)])
                for i, e in enumerate(experts):
                    if arena.crc32(i, layout.block_bytes) != layout.crc32[e]:
                        raise StoreError(
                            f"{reader.path}: block of layer {lid} expert {e} fails its crc32 "
                            "check (file corrupt); re-pack with `specdec pack --force`"
                        )
        return reader.stats.bytes_read


def _sampled(n: int, sample: int | None) -> list[int]:
    """All of range(n), or `sample` indices spread evenly over it (ends included)."""
    if sample is None or sample >= n:
        return list(range(n))
    return sorted({round(i * (n - 1) / max(sample - 1, 1)) for i in range(sample)})
