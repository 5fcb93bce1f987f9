"""`specdec verify PACKED_DIR`: check a packed directory end to end.

Loads and validates experts.json, checks that experts.bin, model.safetensors and (if present)
mtp.safetensors are as long as their headers say, then reads every expert block (in batches of
up to 64 blocks and 256 MiB, so blocks of any size fit; `--io direct` by default, so a damaged disk is not masked by a good copy in the page
cache) and compares its crc32 with the index. Exit 0 with one `ok:` line, or exit 2 with one
line naming the first problem (missing file, truncation, the layer and expert of a corrupt
block) and the fix. Resident weights carry no checksums: only their length is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.core.errors import StoreError
from specdec.core.progress import progress
from specdec.store.arena import Arena
from specdec.store.layout import MTP_FILE, RESIDENT, ExpertIndex
from specdec.store.pools import members, pool_index
from specdec.store.reader import ExpertReader
from specdec.store.safetensors import read_safetensors_header

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
    included): the quick check `specdec pack` runs before keeping an existing pack.
    """
    packed_dir = Path(packed_dir)
    if not packed_dir.is_dir():
        raise StoreError(
            f"{packed_dir}: no such packed directory; create one with `specdec pack MODEL_DIR OUT_DIR`"
        )
    index = ExpertIndex.load(packed_dir)
    if not (packed_dir / "config.json").is_file():
        raise StoreError(f"{packed_dir}/config.json missing; re-pack with `specdec pack`")
    if not (packed_dir / RESIDENT).is_file():
        raise StoreError(f"{packed_dir}/{RESIDENT} missing; re-pack with `specdec pack`")
    resident, _ = read_safetensors_header(packed_dir / RESIDENT)  # checks truncation too
    if (packed_dir / MTP_FILE).is_file():
        resident += read_safetensors_header(packed_dir / MTP_FILE)[0]
    total = 0
    # a mixed pack (two block sizes) is checked one precision at a time (store/pools.py)
    for cold in (False, True) if index.mixed else (None,):
        view = index if cold is None else pool_index(index, cold)
        mask = {lid: members(ly, bool(cold)) for lid, ly in index.layers.items()}
        total += _verify_blocks(packed_dir, view, io, threads, sample, mask)
    return VerifyReport(index.n_blocks, len(index.layers), total, len(resident))


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
