"""What `specdec pack` may replace (store/pack.py packs; store/files.py swap_dir swaps it in).

    check_replaceable(...)      # before the lock: OUT_DIR holds the source or is not ours
    with pack_lock(out_dir):
        remove_stale_tmp(out_dir)                              # marked leftovers of dead packs
        if check_out_dir(model_dir, out_dir, force, fingerprint): ...  # keep a sound pack
        ... write OUT_DIR.tmp-<pid> (marked first) ...
        swap_dir(tmp, out_dir, PACK_KIND, stall)               # durable rename, old pack goes

A pack is ours if it holds the `.specdec-pack` marker (store/files.py). An existing pack of the
very same source files is kept only if a quick check passes (index, agreement with config.json,
resident headers, file sizes, crc32 of 8 blocks per layer); a damaged one is re-packed without
`--force`; `--force` always re-packs (so it repairs whatever `specdec verify` rejects, even a
block the quick check did not sample); another pack needs `--force`; a folder pack did not
write, or one holding the model, is never replaced. tests/pack/test_ownership.py.
"""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from specdec.core.errors import StoreError
from specdec.core.files import check_replaceable, locked, remove_leftovers
from specdec.pack.verify import verify
from specdec.store.layout import EXPERTS_JSON

PACK_KIND = "pack"  # the ownership marker's kind (store/files.py)
SAMPLED_BLOCKS = 8  # per layer, checked before an existing pack is kept


LOCK_SUFFIX = ".pack-lock"  # beside OUT_DIR; inside the model's folder where OUT_DIR is


def pack_lock_path(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}{LOCK_SUFFIX}"


def pack_lock(out_dir: Path) -> AbstractContextManager[None]:
    """One pack per OUT_DIR at a time; a second one waits (and says so)."""
    return locked(pack_lock_path(out_dir), wait=True, what=f"another pack into {out_dir}")


def remove_stale_tmp(out_dir: Path) -> None:
    """Delete OUT_DIR.tmp-<pid> and OUT_DIR.old-<pid> directories left by killed packs.

    Called under the pack lock: every pack into OUT_DIR holds it while those exist, so whoever
    left them is dead (a pid check would see a killed pack not yet reaped as alive). Only
    directories carrying the pack marker (or empty ones) go: a user's `p.old-2024` stays.
    """
    remove_leftovers(out_dir, PACK_KIND, only_dead=False)


def check_out_dir(model_dir: Path, out_dir: Path, force: bool, fingerprint: dict[str, Any]) -> bool:
    """May pack write OUT_DIR? True: keep the existing pack as it is; False: (re)pack.

    Raises for an OUT_DIR that holds the model, one pack did not write, or another pack
    without --force. A pack of these very files (`fingerprint`) is kept only if sound.
    """
    check_replaceable(out_dir, PACK_KIND, model_dir, "`specdec pack`", "--force")
    if not out_dir.is_dir() or not any(out_dir.iterdir()) or force:
        return False
    same = packed_source(out_dir) == fingerprint
    if same:
        problem = pack_problem(out_dir)
        if problem is None:
            return True
        print(f"specdec: note: re-packing {out_dir}: {problem}", file=sys.stderr, flush=True)
        return False  # our own pack of the same files, damaged: repairing it needs no --force
    raise StoreError(
        f"{out_dir} holds another pack (not of {model_dir}'s current files); "
        "pass --force to replace it or choose another OUT_DIR"
    )


def packed_source(out_dir: Path) -> Any:
    """What the pack in out_dir was packed from, read from its index even where the index is
    damaged or of an older format (then the pack is repaired without --force); None if unknown."""
    path = out_dir / EXPERTS_JSON
    if not path.is_file():  # a device or FIFO is never read: it may not end
        return None
    try:
        return json.loads(path.read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        return None


def pack_problem(out_dir: Path) -> str | None:
    """What is wrong with an existing pack (index, sizes, sampled block checksums), or None."""
    try:
        verify(out_dir, io="buffered", threads=2, sample=SAMPLED_BLOCKS)
    except StoreError as e:
        return str(e).split("; re-pack")[0]
    return None
