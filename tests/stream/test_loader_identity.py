"""What a loaded model is: the resolved directory and a content hash, and a pack cache that
notices every file the pack copies.

Run: `pytest tests/stream/test_loader_identity.py`. Issue 22: results named only the model's
argument ("tiny", even when a `./tiny` folder ran), and the first-use pack cache keyed only the
safetensors files and config.json, so a changed chat template or a broken tokenizer.json was
never seen.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from specdec.stream.loader import ensure_packed, load
from tests.helpers import random_checkpoint


@pytest.fixture
def model(tmp_path_factory, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    pristine = random_checkpoint(tmp_path_factory.getbasetemp() / "identity", "deepseek_v3", 4)
    return Path(shutil.copytree(pristine, tmp_path / "model"))


def touch_later(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a new mtime even on coarse clocks


@pytest.mark.parametrize("name", ["tokenizer_config.json", "chat_template.jinja"])
def test_cached_pack_follows_tokenizer_files(model, name):
    first = ensure_packed(model)
    path = model / name
    old = json.loads(path.read_text()) if name.endswith(".json") else {}
    text = json.dumps({**old, "chat_template": "{{ messages }}"}) if old else "{{ messages }}"
    touch_later(path, text)
    second = ensure_packed(model)
    assert second != first
    assert (second / name).read_text() == text


def test_loaded_model_records_its_path_and_content_hash(model):
    sm = load(model, budget="100%", io="buffered")
    try:
        assert sm.source == model.resolve()
        first = sm.model_hash
        assert len(first) == 16
    finally:
        sm.close()
    config = json.loads((model / "config.json").read_text())
    touch_later(model / "config.json", json.dumps({**config, "rope_theta": 5000.0}))
    sm = load(model, budget="100%", io="buffered")
    try:
        assert sm.model_hash != first  # another config is another model
    finally:
        sm.close()


def test_a_cached_copy_of_an_older_index_format_is_removed(model):
    """After an upgrade the stamp changes (it holds the index version): the new copy is packed
    and the old one, whose index this specdec no longer reads, is deleted, not left behind."""
    old = ensure_packed(model)
    index = json.loads((old / "experts.json").read_text())
    (old / "experts.json").write_text(json.dumps({**index, "version": 0}))
    touch_later(model / "config.json", (model / "config.json").read_text())
    new = ensure_packed(model)
    assert new != old and not old.exists()
