"""Packed copies in the specdec cache ($SPECDEC_CACHE/packed): in-use locks and old copies.

An mlx-lm model directory given to `load` is packed once into `packed/<name>-<stamp>`, where the
stamp hashes the source's path, the index version and the sizes and mtimes of every file the pack
is made from (weights, config, tokenizer files, chat templates); touching any of them makes a new
stamp and a new copy. After packing one, `remove_old_copies` deletes the older copies of the same
source, but only directories `specdec pack` wrote (their marker), packed from that very model
directory (their index says so), and not in use: a loaded model holds a shared lock on
`.<copy>.use-lock` (`hold_in_use`), and a copy is deleted only under an exclusive lock on it and
on its pack lock, both taken without waiting. tests/pack/test_packed_cache.py covers each case.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from specdec.core.errors import SpecdecError
from specdec.core.files import acquire, owner
from specdec.pack.guard import PACK_KIND, pack_lock_path, packed_source


def use_lock_path(packed: Path) -> Path:
    return packed.parent / f".{packed.name}.use-lock"


def hold_in_use(packed: Path) -> int:
    """A shared lock saying `packed` is in use; released by os.close(fd) or process exit."""
    return acquire(use_lock_path(packed), wait=True, what=f"{packed} (being removed)", shared=True)


def remove_old_copies(model_dir: Path, keep: Path) -> list[Path]:
    """Delete the other cached packs of `model_dir` that nothing uses; returns those removed."""
    source = str(model_dir.resolve())
    removed = []
    for p in sorted(keep.parent.glob(f"{model_dir.name}-*")):
        if p == keep or not p.is_dir() or p.is_symlink() or owner(p) != PACK_KIND:
            continue
        packed_from = packed_source(p)  # read raw: a copy of an older index format goes too
        if not isinstance(packed_from, dict) or packed_from.get("model_dir") != source:
            continue  # not a pack of this model we can read: leave it to the user
        if _remove_unused(p):
            removed.append(p)
    return removed


def _remove_unused(packed: Path) -> bool:
    fds = []
    try:
        for lock in (pack_lock_path(packed), use_lock_path(packed)):
            fds.append(acquire(lock, wait=False, what=str(packed)))
    except SpecdecError:  # being packed or in use
        for fd in fds:
            os.close(fd)
        return False
    try:
        shutil.rmtree(packed, ignore_errors=True)
        for lock in (pack_lock_path(packed), use_lock_path(packed)):
            lock.unlink(missing_ok=True)
    finally:
        for fd in fds:
            os.close(fd)
    return not packed.exists()
