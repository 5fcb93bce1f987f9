"""Old packed copies in $SPECDEC_CACHE are removed, safely (specdec/pack/packed_cache.py).

Run: `pytest tests/pack/test_packed_cache.py`. A model directory loaded by path is packed into the
cache; touching its config.json makes a new copy, and the old one goes, unless it is in use (a
loaded model holds its lock), or is not one of our packs (no marker), or was packed from
another model directory.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from specdec.core.errors import SpecdecError
from specdec.core.files import acquire
from specdec.pack.packed_cache import hold_in_use, use_lock_path
from specdec.stream.loader import ensure_packed, load
from tests.helpers import random_checkpoint


def touch(path):
    t = time.time_ns() + 10**9
    os.utime(path, ns=(t, t))


@pytest.fixture
def model(tmp_path_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    src = random_checkpoint(tmp_path_factory.getbasetemp(), "qwen3_moe", 4)
    return shutil.copytree(src, tmp_path / "m")


def test_touching_config_replaces_the_cached_copy(model):
    first = ensure_packed(model)
    touch(model / "config.json")
    second = ensure_packed(model)
    assert second != first and (second / "experts.json").is_file()
    assert not first.exists(), "the stale copy of the same model stays in the cache"
    assert [p.name for p in second.parent.iterdir() if not p.name.startswith(".")] == [second.name]


def test_a_copy_in_use_or_not_ours_stays(model, tmp_path):
    first = ensure_packed(model)
    user = first.parent / f"{model.name}-notes"  # same name pattern, not a pack we wrote
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    other = tmp_path / "other" / model.name  # a pack of another model directory, same name
    shutil.copytree(model, other)
    theirs = ensure_packed(other)
    fd = hold_in_use(first)  # what a loaded model holds
    try:
        touch(model / "config.json")
        second = ensure_packed(model)
        assert first.exists(), "a copy in use was removed"
    finally:
        os.close(fd)
    assert (user / "notes.txt").read_text() == "mine" and theirs.exists()
    touch(model / "config.json")
    third = ensure_packed(model)
    assert not first.exists() and not second.exists() and third.exists()
    assert (user / "notes.txt").read_text() == "mine" and theirs.exists()


def test_a_loaded_model_holds_its_copy(model):
    sm = load(model, budget="100%", io="buffered", with_mtp=False)
    try:
        with pytest.raises(SpecdecError, match="in use by another process"):
            os.close(acquire(use_lock_path(sm.path), wait=False, what=str(sm.path)))
    finally:
        sm.close()
    os.close(acquire(use_lock_path(sm.path), wait=False, what=str(sm.path)))  # free again
