"""Safe file handling shared by every command that writes: durable renames, ownership markers,
locks.

    write_atomic(path, text_or_bytes)       # temp name, fsync file, rename, fsync directory
    write_with(path, lambda tmp: fig.savefig(tmp))   # the same for a file another library writes
    durable_replace(tmp, dst)               # the same for a file or directory written by hand
    tmp = fresh_dir(dst, "pack"); ...; swap_dir(tmp, dst, "pack")   # a whole directory, old one deleted
    mark(dir, "pack"); owner(dir) == "pack" # who wrote a directory (specdec never deletes others')
    check_replaceable(out, "pack", src, what, "--force")   # may a command (re)write a directory?
    claim_dir(out, "report", what, hint)    # ... or write into one (report, probe, job dirs)
    check_output_file(path, what, replace, "--overwrite", ours)   # ... or a single file?
    check_output_dir(path)                  # its folder there and writable (before the work)
    fd = open_regular(path)                 # read a file that must be a regular one (no FIFO)
    check_readable(model_dir)               # an input folder this user can read whole
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

The one rule for every output path of every command (tests/core/test_files.py): write only to a
path the command created or marked as its own (a directory's marker; a single file's own format,
checked by the command's `ours`), never rename over a device, a FIFO, a symlink or a foreign
file, never delete what it did not write, append only to its own record files. Directories
written whole go through `check_replaceable` + `fresh_dir` + `swap_dir` (an atomic exchange:
OUT is the old or the new one at every instant, also under Ctrl-C), directories written into
through `claim_dir`, single files through `check_output_file` + `write_atomic`/`write_with`,
which themselves refuse a link or a non-regular file.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from specdec.core.errors import SpecdecError

MARKER_PREFIX = ".specdec-"


def cache_root() -> Path:
    """The user's specdec directory, $SPECDEC_CACHE (default ~/.cache/specdec): packed copies,
    random checkpoints, this machine's measured device profile (profiles/this-machine.yaml)."""
    root = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))
    if root.exists() and not root.is_dir():
        raise SpecdecError(
            f"the specdec cache {root} is not a directory; set SPECDEC_CACHE to a directory "
            "(or unset it for ~/.cache/specdec)"
        )
    return root


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
    whole output directory into before `swap_dir` makes it `dst`. Leftovers of `kind` commands
    that died (killed, disk full) go first, ours of an earlier call too."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    remove_leftovers(dst, kind)
    if tmp.exists():
        remove_leftover(tmp, kind)
    try:
        tmp.mkdir(parents=True)
        mark(tmp, kind)
    except OSError as e:
        remove_leftover(tmp, kind)
        raise write_error(dst, e) from None
    return tmp


def swap_dir(
    tmp: str | os.PathLike,
    dst: str | os.PathLike,
    kind: str,
    stall: Callable[[str], None] = lambda _stage: None,
) -> None:
    """Make the finished directory `tmp` the `kind` directory `dst`, durably; the previous one
    is then deleted. At every instant `dst` is the old directory or the new one: the two are
    exchanged in one call where the system has one (Linux renameat2, macOS renamex_np), else
    moved with Ctrl-C and SIGTERM held off between the two renames and the first undone if the
    second fails. `stall(stage)` is a test hook ('swap': about to swap, 'swapped': new in place)."""
    tmp, dst = Path(tmp), Path(dst)
    fsync_tree(tmp)  # the new tree is durable before any name points at it
    if not dst.exists():
        os.replace(tmp, dst)
        fsync_path(dst.parent)
        stall("swapped")
        return
    stall("swap")
    if _exchange(tmp, dst):
        old = tmp  # the exchange left the previous directory under the temporary name
    else:
        old = dst.with_name(dst.name + f".old-{os.getpid()}")
        with interrupts_deferred():
            os.replace(dst, old)
            try:
                os.replace(tmp, dst)
            except BaseException:
                os.replace(old, dst)
                raise
    fsync_path(dst.parent)
    stall("swapped")
    remove_leftover(old, kind)


_RENAME_EXCHANGE = 2  # Linux renameat2 flag; macOS renamex_np's RENAME_SWAP has the same value
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` atomically; False where the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if sys.platform == "darwin":
            ok = libc.renamex_np(os.fsencode(a), os.fsencode(b), _RENAME_EXCHANGE)
        else:
            ok = libc.renameat2(
                _AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE
            )
    except (AttributeError, OSError):  # no such call in this libc
        return False
    if ok == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # a kernel or file system without exchange: two renames instead
    raise OSError(err, os.strerror(err), str(b))


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done, then deliver them (main thread only:
    signal handlers can only be set there, and Python runs them there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.signal(s, lambda n, _frame: got.append(n)) for s in sigs}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if got:
            signal.raise_signal(got[0])


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a whole file under a temporary name and rename it: never half-written, durable."""
    write_with(path, lambda f: f.write_bytes(data.encode() if isinstance(data, str) else data))


def write_with(path: str | os.PathLike, write: Callable[[Path], object], suffix: str = "") -> Path:
    """`write(tmp)` fills a temporary file beside `path` (unique to this process; ending in
    `suffix` for writers that insist on one), which is then renamed to `path` durably; on
    failure it is deleted and an OSError becomes a one-line error. Refuses to rename over a
    symlink or anything but a regular file (`check_output_file`)."""
    path = Path(path)
    check_output_file(path, "specdec", replace=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{suffix}")
    try:
        write(tmp)
        durable_replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_output_file(
    path: str | os.PathLike,
    what: str,
    replace: bool = False,
    flag: str | None = "--overwrite",
    ours: Callable[[Path], bool] | None = None,
) -> None:
    """The output rule for one file: refuse a symlink, a device, a FIFO or a directory at
    `path`; an existing regular file only with `replace` (the option `flag` sets), and then only
    one that `ours` (the file's own format, e.g. a hotlist header) says `what` wrote."""
    if not str(path).strip():  # Path("") is "." (the working directory)
        raise SpecdecError("the output path is empty; give a file name")
    path = Path(path)
    if path.is_symlink():
        raise SpecdecError(
            f"{path} is a symbolic link: specdec does not write over links; give the real path"
        )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise write_error(path, e) from None
    if not stat.S_ISREG(mode):
        raise SpecdecError(
            f"{path} exists and is not a regular file (a directory, device, FIFO or socket); "
            "choose another output path"
        )
    if not replace:
        how = f"pass {flag} to replace it, or " if flag else ""
        raise SpecdecError(f"{path} exists; {how}choose another output path")
    if ours is not None and not ours(path):
        raise SpecdecError(
            f"{path} exists and was not written by {what}; {flag} only touches its own "
            "output: choose another path"
        )


def check_output_dir(path: str | os.PathLike) -> None:
    """Refuse an output file whose folder does not exist or cannot be written, before the work
    that would end in writing it."""
    folder = Path(path).absolute().parent
    if not folder.is_dir():
        raise SpecdecError(f"{path}: no such directory {folder}; create it or write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecdecError(f"{path}: cannot write into {folder}; check the path and permissions")


def open_regular(
    path: str | os.PathLike, flags: int = os.O_RDONLY, fix: str = "restore the file"
) -> int:
    """os.open for a file that must be a regular file: a FIFO or device at `path` is refused
    (SpecdecError ending in `fix`) instead of blocking forever (opened non-blocking, checked
    with fstat, then made blocking)."""
    refused = SpecdecError(f"{path} is not a regular file (a FIFO, device or socket); {fix}")
    if not stat.S_ISREG(os.stat(path).st_mode):  # before open: flags like O_DIRECT fail on a FIFO
        raise refused
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat
            raise refused
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_readable(directory: str | os.PathLike) -> None:
    """Refuse an input directory (a model, a pack) that this user cannot read whole, the folder
    itself or a file in it, in one line instead of a PermissionError deep in a loader."""
    d = Path(directory)
    try:
        for p in d.iterdir():
            if p.is_file():  # a stat: fails in a folder that cannot be searched
                os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK))
    except PermissionError as e:
        raise SpecdecError(
            f"{e.filename or d}: cannot read ({e.strerror}); make it readable (chmod u+rX) or "
            "run as its owner"
        ) from None


def check_free_space(directory: str | os.PathLike, need: int, what: str) -> None:
    """Refuse to start writing `need` bytes into `directory` (or its nearest existing parent)
    when the file system has less free."""
    d = Path(directory).absolute()
    while not d.exists() and d != d.parent:
        d = d.parent
    try:
        free = shutil.disk_usage(d).free
    except OSError:
        return  # no statfs here: the write itself will say if the disk fills
    if free < need:
        raise SpecdecError(
            f"{what} needs {_size(need)} but {d} has {_size(free)} free; free space or write "
            "elsewhere"
        )


def _size(n: int) -> str:
    return f"{n / 2**10:.0f} KiB" if n < 10 * 2**20 else f"{n / 2**20:.0f} MiB"


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
    if out.is_symlink():
        raise SpecdecError(
            f"{out} is a symbolic link: specdec does not replace links; give the real path"
        )
    if out.exists() and not out.is_dir():
        raise SpecdecError(f"{out} exists and is not a directory; choose another output path")
    if out.is_dir() and any(out.iterdir()) and owner(out) != kind:
        raise SpecdecError(
            f"{out} exists and was not written by {what} (no {MARKER_PREFIX}{kind} marker); "
            f"{flag} only replaces its own output: delete it yourself or choose another directory"
        )


def claim_dir(
    out: str | os.PathLike,
    kind: str,
    what: str,
    hint: str,
    names: Iterable[str] | None = None,
    ignore: Callable[[Path], bool] = lambda _p: False,
    also: tuple[str, ...] = (),
) -> Path:
    """Make `out` an output directory of `kind` commands, or refuse.

    A missing or empty `out` is created and marked; one with the `kind` marker (or that of a
    kind in `also`: a probe writes into the job directory of the specdec-exp task running it)
    is ours. Any
    other (entries for which `ignore` holds aside) is the user's: refused, unless the call
    writes only the files `names` and none of them exists yet (new files beside the user's are
    created, none replaced). `hint` says what to do instead."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        check_replaceable(out, kind, None, what, "")  # the one-line refusal of links and files
    if owner(out) in (kind, *also):
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
        theirs = sorted(p.name for p in out.iterdir() if not ignore(p))
        if not theirs:
            mark(out, kind)
            return out
    except OSError as e:
        raise write_error(out, e) from None
    if names is not None and not any((out / n).exists() or (out / n).is_symlink() for n in names):
        return out
    if owner(out) in (kind, *also):  # marked meanwhile by a writer of ours running beside us
        return out
    shown = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
    raise SpecdecError(
        f"{out} holds files {what} did not write ({shown}; no {MARKER_PREFIX}{kind} marker); {hint}"
    )


def remove_leftover(path: Path, kind: str) -> bool:
    """Delete a leftover temporary directory if a `kind` command wrote it (or it is empty)."""
    if path.is_symlink():
        return False
    if owner(path) == kind:
        shutil.rmtree(path, ignore_errors=True)
        return True
    try:
        path.rmdir()  # empty: killed before its marker; rmdir cannot delete anything else
        return True
    except OSError:
        return False


def remove_leftovers(dst: Path, kind: str, only_dead: bool = True) -> None:
    """Delete `dst.tmp-<pid>` and `dst.old-<pid>` directories that `kind` commands left.

    Only those whose process is gone (only_dead), and only directories carrying the `kind`
    marker (or empty ones): a user's `p.old-2024` stays. A caller that holds a lock every
    writer of `dst` takes may pass only_dead=False (a killed writer not yet reaped looks alive).
    """
    dst = Path(dst)
    for sep in (".tmp-", ".old-"):
        for p in dst.parent.glob(dst.name + sep + "*"):
            pid = p.name.rsplit("-", 1)[-1]
            if pid.isdigit() and p.is_dir() and not (only_dead and _alive(int(pid))):
                remove_leftover(p, kind)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process: alive; an absurd number: leave the folder be
    return True


# ----------------------------------------------------------------------------- locks


def acquire(path: str | os.PathLike, wait: bool, what: str, shared: bool = False) -> int:
    """Take a flock on `path` (created if needed) and return its descriptor; closing the
    descriptor (or dying) releases it.

    wait=True blocks with a note on stderr; wait=False refuses with a one-line SpecdecError.
    shared=True takes a shared lock (many holders; excludes only an exclusive one).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:  # a read-only or unwritable output directory
        raise write_error(path.parent, e) from None
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
