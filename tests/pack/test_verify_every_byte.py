"""`specdec verify` checks every byte a pack wrote, and `pack --force` rebuilds what it rejects.

Run: `pytest tests/pack/test_verify_every_byte.py`. A random DeepSeek-V3 4-bit checkpoint (with
its MTP layer) is packed once; each case damages a copy of the pack the way issue 22 found
verify passing it (resident or MTP bytes flipped, mtp.safetensors deleted, the index edited),
then requires verify to name the problem, and the re-pack to repair it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec.core.errors import StoreError
from specdec.pack.pack import pack
from specdec.pack.verify import verify
from specdec.store.layout import EXPERTS_BIN, EXPERTS_JSON, MTP_FILE, RESIDENT, ExpertIndex
from tests.helpers import random_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return random_checkpoint(tmp_path_factory.mktemp("verify"), "deepseek_v3", 4)


@pytest.fixture(scope="module")
def pristine(model, tmp_path_factory) -> Path:
    return pack(model, tmp_path_factory.mktemp("verify-packed") / "packed")


@pytest.fixture
def packed(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "packed"))


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def edit_index(packed: Path, edit) -> None:
    index = json.loads((packed / EXPERTS_JSON).read_text())
    edit(index)
    (packed / EXPERTS_JSON).write_text(json.dumps(index))


def first(index: dict) -> dict:
    return index["layers"][min(index["layers"], key=int)]


def quantized_to_f32(index: dict) -> None:
    for t in first(index)["tensors"]:
        if t["dtype"] == "U32":
            t["dtype"] = "F32"  # same bytes per element: only the dtype lies


def two_experts_one_block(index: dict) -> None:
    ly = first(index)
    ly["offsets"][1], ly["crc32"][1] = ly["offsets"][0], ly["crc32"][0]


def layer_key(key: str):
    def edit(index: dict) -> None:
        index["layers"][key] = index["layers"].pop(min(index["layers"], key=int))

    return edit


def swapped_experts(index: dict) -> None:
    """Experts 0 and 1 trade blocks, checksums and all: every crc32 still matches."""
    ly = first(index)
    for field in ("offsets", "crc32"):
        ly[field][0], ly[field][1] = ly[field][1], ly[field][0]


DAMAGE = {
    "resident byte": (lambda p: flip(p / RESIDENT, (p / RESIDENT).stat().st_size - 100), "crc32"),
    "mtp byte": (lambda p: flip(p / MTP_FILE, (p / MTP_FILE).stat().st_size - 100), "crc32"),
    "mtp deleted": (lambda p: (p / MTP_FILE).unlink(), f"{MTP_FILE} missing"),
    "dtype U32 -> F32": (lambda p: edit_index(p, quantized_to_f32), "not U32"),
    "layer key -1": (lambda p: edit_index(p, layer_key("-1")), "not a layer number"),
    "layer key 01": (lambda p: edit_index(p, layer_key("01")), "not a layer number"),
    "two experts swapped": (lambda p: edit_index(p, swapped_experts), "not in expert order"),
    "version 2.0": (lambda p: edit_index(p, lambda i: i.update(version=2.0)), "an integer"),
    "two experts, one block": (lambda p: edit_index(p, two_experts_one_block), "overlap"),
    "index without resident checksums": (
        lambda p: edit_index(p, lambda i: i.update(resident={})),
        f"records no {RESIDENT}",
    ),
    "a safetensors file pack did not write": (
        lambda p: shutil.copy(p / MTP_FILE, p / "model-extra.safetensors"),
        "pack did not write",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_verify_rejects_and_force_repacks(model, packed, case):
    damage, words = DAMAGE[case]
    verify(packed, io="buffered")
    damage(packed)
    with pytest.raises(StoreError, match=words):
        verify(packed, io="buffered")
    pack(model, packed, force=True)
    verify(packed, io="buffered")


def test_resident_header_edit_named(packed):
    """A resident header's dtype edited in place (F32 -> I32, same length and byte size)."""
    raw = (packed / RESIDENT).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = raw[8 : 8 + n].replace(b'"F32"', b'"I32"', 1)
    (packed / RESIDENT).write_bytes(raw[:8] + header + raw[8 + n :])
    with pytest.raises(StoreError, match="header changed since packing"):
        verify(packed, io="buffered")


def test_force_repairs_a_block_the_quick_check_does_not_sample(model, packed):
    """pack's quick check reads 8 blocks per layer; --force re-packs, whatever it samples."""
    layout = ExpertIndex.load(packed).layers[1]
    flip(packed / EXPERTS_BIN, int(layout.offsets[3]) + 100)  # expert 3: not among the 8
    with pytest.raises(StoreError, match="layer 1 expert 3 fails its crc32"):
        verify(packed, io="buffered")
    pack(model, packed, force=True)
    verify(packed, io="buffered")


def test_pack_of_the_same_files_repairs_an_old_format_index(model, packed):
    """An index of another version, from these very files, is re-packed without --force."""
    edit_index(packed, lambda i: i.update(version=0))
    pack(model, packed)
    verify(packed, io="buffered")
