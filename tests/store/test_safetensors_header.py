"""The safetensors header parser is as strict as the reference parser (the safetensors crate).

Run: `pytest tests/store/test_safetensors_header.py`. Each case writes a small real safetensors
file with one thing wrong in its header (issue 22: a negative or overlapping `data_offsets` was
accepted, and pack copied header bytes in as weights); `read_safetensors_header` must refuse it
with one StoreError line naming the problem, and the reference parser (`safetensors.safe_open`)
refuses it too, so the rule here is the format's, not a stricter one of ours. A valid file,
zero-sized tensors included, parses to the same tensors as the reference reads.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from specdec.core.errors import StoreError
from specdec.store.safetensors import read_safetensors_header

reference = pytest.importorskip("safetensors")


def header_of(entries: dict) -> dict:
    """A valid header: tensors back to back in the given order."""
    out, pos = {}, 0
    for name, (dtype, shape, nbytes) in entries.items():
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    return out


VALID = {"a": ("F32", [2, 3], 24), "b": ("U32", [4], 16), "empty": ("F16", [0, 5], 0)}


def write(path: Path, header, data_bytes: int, raw: bytes | None = None) -> Path:
    body = raw if raw is not None else json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"\1" * data_bytes)
    return path


def shifted(h: dict, name: str, offsets: list) -> dict:
    h[name]["data_offsets"] = offsets
    return h


CASES = {
    "a JSON list": (None, 40, b"[1,2,3]", "a JSON list, not an object"),
    "reversed data_offsets": (lambda h: shifted(h, "b", [40, 24]), 40, None, "span -16"),
    "negative offset": (lambda h: shifted(h, "a", [-8, 16]), 40, None, "not [begin, end] >= 0"),
    "overlapping tensors": (lambda h: shifted(h, "b", [16, 32]), 40, None, "overlaps"),
    "a gap between tensors": (lambda h: shifted(h, "b", [32, 48]), 48, None, "leaves a gap"),
    "bytes after the last tensor": (lambda h: h, 48, None, "8 bytes after the last tensor"),
    "dtype a list": (lambda h: h["a"].update(dtype=[1]) or h, 40, None, "dtype [1]"),
    "unknown dtype": (lambda h: h["a"].update(dtype="F7") or h, 40, None, "dtype 'F7'"),
    "shape x dtype != bytes": (lambda h: h["a"].update(shape=[2, 4]) or h, 40, None, "span 24"),
    "shape not integers": (
        lambda h: h["a"].update(shape=[2, "3"]) or h,
        40,
        None,
        "shape [2, '3']",
    ),
    "no data_offsets": (lambda h: h["a"].pop("data_offsets") and h, 40, None, "lacks"),
    "metadata not strings": (
        lambda h: h.update(__metadata__={"format": 1}) or h,
        40,
        None,
        "__metadata__",
    ),
    "truncated data": (lambda h: h, 32, None, "runs past the end of the file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_header_refused_like_the_reference(tmp_path, case):
    edit, data_bytes, raw, words = CASES[case]
    header = None if edit is None else edit(header_of(VALID))
    path = write(tmp_path / "x.safetensors", header, data_bytes, raw)
    with pytest.raises(StoreError, match=re.escape(words)) as e:
        read_safetensors_header(path)
    assert "\n" not in str(e.value)
    with pytest.raises(Exception):  # noqa: B017 the reference's own error types
        with reference.safe_open(str(path), "np") as f:
            [f.get_tensor(k) for k in f.keys()]


def test_valid_file_parses_as_the_reference_reads_it(tmp_path):
    path = write(tmp_path / "ok.safetensors", header_of(VALID), 40)
    tensors, _ = read_safetensors_header(path)
    raw = path.read_bytes()
    with reference.safe_open(str(path), "np") as f:
        assert sorted(t.name for t in tensors) == sorted(f.keys())
        for t in tensors:
            ref = f.get_tensor(t.name)
            assert list(ref.shape) == list(t.shape)
            assert raw[t.offset : t.offset + t.nbytes] == np.ascontiguousarray(ref).tobytes()
