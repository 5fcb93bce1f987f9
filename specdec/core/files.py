"""Safe file handling shared by every command that writes: durable renames, ownership markers,
locks.

    write_atomic(path, text_or_bytes)       # temp name, fsync file, rename, fsync directory
    durable_replace(tmp, dst)               # the same for a file or directory written by hand
    tmp = fresh_dir(dst, "pack"); ...; swap_dir(tmp, dst, "pack")   # a whole directory, old one deleted
    mark(dir, "pack"); owner(dir) == "pack" # who wrote a directory (specdec never deletes others')
    with locked(path, wait=False, what=...): ...   # one holder at a time (flock, freed on death)
    fd = acquire(path, wait=True, what=..., shared=True)   # the same, held until os.close(fd)
    cache_root()                            # the user's specdec directory ($SPECDEC_CACHE)

Durability: a rename is only as durable as the data it points to, so the renamed file (every
file of a renamed directory) is fsynced before the rename and the directory holding the new
name after it; without that, a power loss can leave a name pointing at an empty or half-written
file (ext4 data=ordered keeps that ordering for replaced files but not for new ones).
Ownership: a directory that a specdec command writes gets a `.specdec-<kind>` marker file first
thing, so replacing (`--force`, `--overwrite`) and cleaning leftovers touch only directories a
command of that kind wrote, never a user's folder that happens to have the same name.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from specdec.core.errors import SpecdecError

MARKER_PREFIX = ".specdec-"


def cache_root() -> Path:
    """The user's specdec directory, $SPECDEC_CACHE (default ~/.cache/specdec): packed copies,
    random checkpoints, this machine's measured device profile (profiles/this-machine.yaml)."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


def fsync_path(path: str | os.PathLike) -> None:
    """fsync one file or directory (a directory fsync makes the names in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """fsync a file, or every file and directory under a directory (itself last)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            if not child.is_symlink():
                fsync_tree(child)
    fsync_path(path)


def durable_replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """os.replace(src, dst) that survives a power loss: data fsynced before, the name after."""
    fsync_tree(src)
    os.replace(src, dst)
    fsync_path(Path(dst).parent)


def fresh_dir(dst: str | os.PathLike, kind: str) -> Path:
    """A new empty `dst.tmp-<pid>` beside `dst`, marked for `kind` first thing, to write a
    whole output directory into before `swap_dir` makes it `dst` (a leftover of ours goes)."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        remove_leftover(tmp, kind)
    tmp.mkdir(parents=True)
    mark(tmp, kind)
    return tmp


def swap_dir(
    tmp: str | os.PathLike,
    dst: str | os.PathLike,
    kind: str,
    stall: Callable[[str], None] = lambda _stage: None,
) -> None:
    """Make the finished directory `tmp` the `kind` directory `dst`, durably; the previous one
    (moved aside first) is then deleted. `stall(stage)` is a test hook ('swap': old moved
    aside, 'swapped': new in place)."""
    dst = Path(dst)
    old = dst.with_name(dst.name + f".old-{os.getpid()}")
    if dst.exists():
        os.replace(dst, old)
        stall("swap")
    durable_replace(tmp, dst)
    stall("swapped")
    if old.exists():
        remove_leftover(old, kind)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a whole file under a temporary name and rename it: never half-written, durable."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        durable_replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_error(path: str | os.PathLike, e: OSError) -> SpecdecError:
    """A one-line error for a failed write (disk full, read-only, no permission)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return SpecdecError(f"{path}: disk full while writing; free space or write elsewhere")
    return SpecdecError(f"{path}: cannot write ({e.strerror or e}); check the path and permissions")


# ----------------------------------------------------------------------------- ownership


def mark(directory: str | os.PathLike, kind: str) -> None:
    """Claim `directory` for a command of `kind` ('pack', 'trace', 'random')."""
    Path(directory, MARKER_PREFIX + kind).write_text(
        f"written by specdec ({kind}); pid {os.getpid()}\n"
    )


def owner(directory: str | os.PathLike) -> str | None:
    """The kind of specdec command that wrote `directory`, or None (not ours, or not a dir)."""
    try:
        names = [p.name for p in Path(directory).iterdir()]
    except OSError:
        return None
    kinds = [n[len(MARKER_PREFIX) :] for n in names if n.startswith(MARKER_PREFIX)]
    return kinds[0] if len(kinds) == 1 else None


def contains(outer: str | os.PathLike, inner: str | os.PathLike) -> bool:
    """True if `inner` is `outer` or lies inside it (symlinks resolved)."""
    outer, inner = Path(outer).resolve(), Path(inner).resolve()
    return outer == inner or outer in inner.parents


def check_replaceable(out: Path, kind: str, source: Path | None, what: str, flag: str) -> None:
    """Refuse an output directory whose replacement could delete what a user owns.

    `out` must not hold the source (or be it), and an existing non-empty `out` must carry this
    command's marker; `flag` is the option that allows replacing one (`--force`).
    """
    if source is not None and contains(out, source):
        raise SpecdecError(
            f"{out} contains the source {source}: writing there would delete it; choose an "
            "output directory outside the source"
        )
    if out.exists() and not out.is_dir():
        raise SpecdecError(f"{out} exists and is not a directory; choose another output path")
    if out.is_dir() and any(out.iterdir()) and owner(out) != kind:
        raise SpecdecError(
            f"{out} exists and was not written by {what} (no {MARKER_PREFIX}{kind} marker); "
            f"{flag} only replaces its own output: delete it yourself or choose another directory"
        )


def remove_leftover(path: Path, kind: str) -> bool:
    """Delete a leftover temporary directory if a `kind` command wrote it (or it is empty)."""
    if owner(path) == kind:
        shutil.rmtree(path, ignore_errors=True)
        return True
    try:
        path.rmdir()  # empty: killed before its marker; rmdir cannot delete anything else
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- locks


def acquire(path: str | os.PathLike, wait: bool, what: str, shared: bool = False) -> int:
    """Take a flock on `path` (created if needed) and return its descriptor; closing the
    descriptor (or dying) releases it.

    wait=True blocks with a note on stderr; wait=False refuses with a one-line SpecdecError.
    shared=True takes a shared lock (many holders; excludes only an exclusive one).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        if not wait:
            os.close(fd)
            raise SpecdecError(
                f"{what} is in use by another process (lock {path}); wait for it to finish "
                "or choose another output"
            ) from None
        print(f"specdec: note: waiting for {what}", file=sys.stderr, flush=True)
        fcntl.flock(fd, mode)
    return fd


@contextmanager
def locked(path: str | os.PathLike, wait: bool, what: str) -> Iterator[None]:
    """Hold an exclusive flock on `path` for the block (see `acquire`)."""
    fd = acquire(path, wait, what)
    try:
        yield
    finally:
        os.close(fd)
