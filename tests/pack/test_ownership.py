"""Nothing a user owns is deleted, and what we write survives a power loss (store/files.py).

Run: `pytest tests/pack/test_ownership.py`. pack, trace and make-random replace only directories
their own kind wrote (a `.specdec-<kind>` marker), never one that holds the source; pack's
leftovers are recognised by the marker, not the name; an existing pack of the same files is
checked before it is kept; every rename is preceded by an fsync of what it renames and followed
by one of its directory (checked by wrapping os.fsync: a real power cut cannot be made here).
The one-line messages of these refusals are rows of docs/errors.md.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from specdec.checkpoint.random_models import make_random
from specdec.core import files
from specdec.core.errors import SpecdecError
from specdec.pack.pack import pack
from specdec.pack.verify import verify
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, ExpertIndex
from specdec.trace.format import Trace, save_trace
from tests.helpers import random_checkpoint


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def model(tmp_path_factory, tmp_path) -> Path:
    """A user's models folder: the checkpoint, a sibling model and a notes file."""
    src = random_checkpoint(tmp_path_factory.getbasetemp(), "qwen3_moe", 4)
    home = tmp_path / "models"
    shutil.copytree(src, home / "qwen")
    (home / "sibling").mkdir()
    (home / "sibling" / "config.json").write_text("{}")
    (home / "notes.txt").write_text("mine")
    return home / "qwen"


def test_pack_force_never_deletes_the_source_or_its_folder(model):
    before = tree(model.parent)
    for out in (model.parent, model, model / ".."):
        with pytest.raises(SpecdecError, match="contains the source"):
            pack(model, out, force=True)
    assert tree(model.parent) == before


def test_pack_replaces_only_its_own_and_cleans_only_marked_leftovers(model, tmp_path):
    out = tmp_path / "p"
    pack(model, out)
    assert files.owner(out) == "pack"
    users = [tmp_path / "p.old-2024", tmp_path / "p.tmp-1"]  # a user's folders, pack's names
    for d in users:
        d.mkdir()
        (d / "data.txt").write_text("mine")
    dead = tmp_path / "p.tmp-999999"  # a killed pack's leftover: marked
    dead.mkdir()
    files.mark(dead, "pack")
    other = shutil.copytree(model, tmp_path / "other")
    (other / "config.json").write_text((other / "config.json").read_text() + " ")
    with pytest.raises(SpecdecError, match="holds another pack"):
        pack(other, out)
    pack(other, out, force=True)  # our own kind: replaced
    assert ExpertIndex.load(out).source["model_dir"] == str(other.resolve())
    assert not dead.exists()
    assert all((d / "data.txt").read_text() == "mine" for d in users)
    assert not (out / ".specdec-random").exists()  # the source's marker is not copied


def test_a_pack_into_the_models_own_folder_does_not_change_its_fingerprint(model, tmp_path):
    """`pack M M/packed` leaves its lock, .packed.pack-lock, in M: it was counted (and copied)
    as one of M's files, so a pack of M made before it looked like another model's ("holds
    another pack"); the lock is no file of the model."""
    out = pack(model, tmp_path / "p")
    pack(model, model / "packed")
    assert (model / ".packed.pack-lock").exists()
    mtime = (out / EXPERTS_BIN).stat().st_mtime_ns
    pack(model, out)  # the same files: kept as it is, no --force
    assert (out / EXPERTS_BIN).stat().st_mtime_ns == mtime
    assert not (out / ".packed.pack-lock").exists()


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_repack_repairs_a_damaged_pack_of_the_same_files(model, tmp_path, capsys, damage):
    out = pack(model, tmp_path / "p")
    index = ExpertIndex.load(out)
    if damage == "truncate":
        os.truncate(out / EXPERTS_BIN, index.file_bytes - 4096)
    else:  # one flipped byte in the first block (always among the sampled ones)
        off = int(index.layers[index.layer_ids[0]].offsets[0]) + 10
        with open(out / EXPERTS_BIN, "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0xFF]))
    pack(model, out)  # no --force needed: our own pack of these very files
    assert "specdec: note: re-packing" in capsys.readouterr().err
    verify(out, io="buffered")
    mtime = (out / EXPERTS_BIN).stat().st_mtime_ns
    pack(model, out)  # sound now: kept as it is
    assert (out / EXPERTS_BIN).stat().st_mtime_ns == mtime


def test_make_random_force_replaces_only_its_own(tmp_path):
    out = make_random("mixtral", tmp_path / "m")
    with pytest.raises(SpecdecError, match="not empty"):
        make_random("mixtral", out, seed=1)
    make_random("mixtral", out, seed=1, force=True)
    assert files.owner(out) == "random"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("x")
    with pytest.raises(SpecdecError, match="no .specdec-random marker"):
        make_random("mixtral", tmp_path / "mine", force=True)
    assert (tmp_path / "mine" / "a.txt").read_text() == "x"


def small_trace() -> Trace:
    experts = np.arange(24, dtype=np.int32).reshape(3, 2, 4) % 8
    return Trace(experts, 8, [4096, 4096])


def test_trace_overwrite_replaces_only_traces(tmp_path):
    save_trace(small_trace(), tmp_path / "t")
    save_trace(small_trace(), tmp_path / "t", overwrite=True)
    assert files.owner(tmp_path / "t") == "trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no .old leftovers
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("x")
    with pytest.raises(SpecdecError, match="no .specdec-trace marker"):
        save_trace(small_trace(), tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "a.txt").read_text() == "x"


@pytest.fixture
def fsynced(monkeypatch) -> list[str]:
    """Paths os.fsync is called on, in order (files and directories)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name file descriptors")
    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_renames_are_fsynced_before_and_after(fsynced, model, tmp_path, monkeypatch):
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace(src, dst):
        renames.append((str(Path(src).resolve()), str(Path(dst).resolve())))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    out = pack(model, tmp_path / "p")
    src, dst = renames[-1]  # the finished pack moved into place
    assert dst == str(out.resolve())
    before = fsynced[: fsynced.index(str(tmp_path.resolve()))]  # everything up to the dir sync
    for name in (EXPERTS_BIN, EXPERTS_JSON, "model.safetensors", "config.json"):
        assert f"{src}/{name}" in before, f"{name} not fsynced before the rename"
    assert src in before, "the pack directory itself not fsynced before its rename"
    assert fsynced[-1] == str(tmp_path.resolve()), "the parent directory not fsynced after"

    fsynced.clear()
    files.write_atomic(tmp_path / "x.json", "{}")
    assert fsynced == [str(tmp_path / ".x.json.tmp-") + str(os.getpid()), str(tmp_path)]

    fsynced.clear()
    save_trace(small_trace(), tmp_path / "t")
    assert fsynced[-1] == str(tmp_path) and f"{tmp_path}/t" not in fsynced[:-1]
    assert any(p.endswith("/experts.npy") for p in fsynced)
