"""User errors of the store, through the real CLI: one line on stderr, exit 2, no traceback.

Run: `pytest tests/store/test_store_errors.py`. Each case damages a real packed directory the way a
user's disk or a killed process would, then runs `python -m specdec ...` in a subprocess.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import StoreError
from specdec.pack.pack import pack
from specdec.store.arena import Arena, block_layout
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, ExpertIndex
from specdec.store.reader import ExpertReader
from tests.helpers import pinned_stand_in

ROOT = Path(__file__).resolve().parents[2]


def specdec(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "specdec", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def assert_user_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_random("qwen3_moe", tmp_path_factory.mktemp("m") / "model", bits=4)


@pytest.fixture
def packed(model_dir, tmp_path) -> Path:
    return pack(model_dir, tmp_path / "packed")


@pytest.mark.slow
def test_cli_pack_then_verify_ok(model_dir, tmp_path):
    proc = specdec("pack", model_dir, tmp_path / "p")
    assert proc.returncode == 0, proc.stderr
    assert "48 expert blocks in 3 layers" in proc.stdout
    proc = specdec("verify", tmp_path / "p")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok:")


@pytest.mark.slow
def test_truncated_experts_bin(packed):
    path = packed / EXPERTS_BIN
    os.truncate(path, path.stat().st_size - 4096)
    assert_user_error(specdec("verify", packed), "truncated", "re-pack")
    with pytest.raises(StoreError, match="truncated"):
        ExpertReader(packed, ExpertIndex.load(packed), Arena(1, 16384), io="buffered")


@pytest.mark.slow
def test_corrupt_block_named_by_verify_and_checksummed_reader(packed):
    index = ExpertIndex.load(packed)
    offset = int(index.layers[1].offsets[7]) + 100
    with open(packed / EXPERTS_BIN, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert_user_error(specdec("verify", packed), "layer 1 expert 7", "crc32")
    arena = Arena(2, index.slot_bytes)
    with ExpertReader(packed, index, arena, io="direct", verify_checksums=True) as reader:
        reader.read([(1, 6, 0)])  # an intact block passes
        with pytest.raises(StoreError, match="layer 1 expert 7"):
            reader.read([(1, 7, 1)])
    with ExpertReader(packed, index, arena, io="direct") as reader:
        reader.read([(1, 7, 1)])  # without verification the damage goes unnoticed


@pytest.mark.slow
def test_missing_index(packed):
    (packed / EXPERTS_JSON).unlink()
    assert_user_error(specdec("verify", packed), "not a packed directory", "specdec pack")


@pytest.mark.slow
def test_malformed_index(packed):
    (packed / EXPERTS_JSON).write_text('{"version": 1, "layers": {"0": {}}}')
    assert_user_error(specdec("verify", packed), "malformed", "re-pack")


@pytest.mark.slow
def test_o_direct_refused_on_tmpfs_and_pinned_reads_it_buffered(packed, monkeypatch):
    shm = Path("/dev/shm")
    if not shm.is_dir() or sys.platform != "linux":
        pytest.skip("needs a tmpfs at /dev/shm (Linux)")
    dest = Path(shutil.copytree(packed, shm / f"specdec-test-{os.getpid()}"))
    try:
        assert_user_error(specdec("verify", dest), "tmpfs", "--io buffered")
        assert specdec("verify", dest, "--io", "buffered").returncode == 0
        index = ExpertIndex.load(dest)
        with pytest.raises(StoreError, match="--io buffered"):
            ExpertReader(dest, index, Arena(1, index.slot_bytes), io="direct")
        layout = block_layout(index)
        with ExpertReader(dest, index, Arena(1, index.slot_bytes, layout), io="buffered") as r:
            r.read([(0, 0, 0)])
            want = np.array(r.arena.tensor_view(index.layers[0].tensors[0])[0])
        # pinned is about how a block lands, not the source: a RAM file system is read without
        # O_DIRECT (the copy engine's stand-in here, as CI has no GPU)
        made = pinned_stand_in(monkeypatch)
        opened = []
        real_open = os.open
        monkeypatch.setattr(
            os, "open", lambda p, f, *a, **kw: opened.append(f) or real_open(p, f, *a, **kw)
        )
        with ExpertReader(dest, index, Arena(1, index.slot_bytes, layout), io="pinned") as r:
            r.read([(0, 0, 0)])
            got = np.array(r.arena.tensor_view(index.layers[0].tensors[0])[0])
        assert opened and not any(f & getattr(os, "O_DIRECT", 0) for f in opened)
        assert made[0].landed > 0 and np.array_equal(got, want)
    finally:
        shutil.rmtree(dest)


def test_o_direct_einval_at_open(packed, monkeypatch):
    """Older kernels' tmpfs, some FUSE and network file systems refuse O_DIRECT with EINVAL.

    None here does (tmpfs accepts it since Linux 6.6), so the refusal is injected at os.open.
    """
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("O_DIRECT is Linux's; macOS uses F_NOCACHE, which cannot be refused")
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    index = ExpertIndex.load(packed)
    with pytest.raises(StoreError, match="refuses O_DIRECT.*--io buffered"):
        ExpertReader(packed, index, Arena(1, index.slot_bytes), io="direct")


@pytest.mark.slow
def test_pack_refuses_to_overwrite_other_dir(model_dir, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    assert_user_error(specdec("pack", model_dir, other), "no .specdec-pack marker")
    assert_user_error(specdec("pack", model_dir, other, "--force"), "no .specdec-pack marker")
    assert [p.name for p in other.iterdir()] == ["precious.txt"]
    assert (other / "precious.txt").read_text() == "keep me"


def test_repack_of_same_source_is_a_noop(model_dir, packed):
    mtime = (packed / EXPERTS_BIN).stat().st_mtime_ns
    assert pack(model_dir, packed) == packed
    assert (packed / EXPERTS_BIN).stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_not_a_model_dir(tmp_path):
    assert_user_error(specdec("pack", tmp_path, tmp_path / "out"), "config.json")


@pytest.mark.slow
def test_killed_pack_leaves_no_valid_looking_dir(model_dir, tmp_path):
    out = tmp_path / "packed"
    script = (
        "import os, signal, sys\n"
        "from specdec.pack.pack import pack\n"
        "def die(layer, expert):\n"
        "    if (layer, expert) == (1, 3):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"pack({str(model_dir)!r}, {str(out)!r}, on_block=die)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    leftovers = list(tmp_path.glob("packed.tmp-*"))
    assert leftovers and not any((p / EXPERTS_JSON).exists() for p in leftovers)
    assert_user_error(specdec("verify", leftovers[0]), "not a packed directory")
    pack(model_dir, out)  # the next pack cleans the dead one's temporary dir
    assert not list(tmp_path.glob("packed.tmp-*"))
    assert ExpertIndex.load(out).n_blocks == 48


def test_eio_retried_then_named(packed):
    index = ExpertIndex.load(packed)
    with ExpertReader(packed, index, Arena(1, index.slot_bytes), io="buffered") as reader:
        calls = []

        def flaky(layer, expert, attempt):
            calls.append(attempt)
            if attempt < 2:
                raise OSError(errno.EIO, "Input/output error")
            return 4096 + 17  # then short reads, completed in a loop

        reader.fault_hook = flaky
        reader.read([(2, 5, 0)])
        assert calls[:3] == [0, 1, 2] and len(calls) > 3
        reader.fault_hook = lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))
        with pytest.raises(StoreError, match=r"layer 2 expert 9 .* after 4 attempt"):
            reader.read([(2, 9, 0)])


def test_pinned_reads_need_the_cuda_backend(packed):
    """`--io pinned` lands blocks by the CUDA copy engine: elsewhere a one-line error naming the
    fix, before any reader thread starts (the file it opened closed again)."""
    from specdec.core.accelerator import on_cuda

    if on_cuda():
        pytest.skip("MLX's CUDA backend is here: pinned reads run (bench_cuda.py pinned)")
    assert_user_error(specdec("verify", packed, "--io", "pinned"), "CUDA backend", "--io direct")


def test_copy_engine_without_a_cuda_driver_is_a_clear_error():
    """CudaCopy itself, where libcuda.so.1 is absent (this CPU machine): one StoreError naming
    the fix, not ctypes' OSError."""
    import ctypes.util

    from specdec.store.cuda_copy import CudaCopy

    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is installed here")
    with pytest.raises(StoreError, match=r"libcuda\.so\.1.*--io direct"):
        CudaCopy()


def test_the_default_io_is_the_backends_and_every_run_records_it():
    """`direct` off CUDA (`pinned` there: specdec.store.reader.default_io); the loader resolves
    an unset io, and the run's summary records what it read with."""
    from specdec.core.accelerator import on_cuda
    from specdec.decode.loop import DecodeConfig
    from specdec.decode.run import generate
    from specdec.store.reader import default_io
    from specdec.stream.loader import load

    assert default_io() == ("pinned" if on_cuda() else "direct")
    sm = load("tiny", budget="25%", with_mtp=False)
    try:
        assert sm.streamer.reader.io == default_io()
        res = generate(sm, sm.encode("def f(x):"), "none", DecodeConfig(1, 4))
        assert res.summary["io"] == default_io()
    finally:
        sm.close()
    sm = load("tiny", budget="25%", io="buffered", with_mtp=False)
    try:
        assert sm.streamer.reader.io == "buffered"
    finally:
        sm.close()
