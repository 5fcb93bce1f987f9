"""Safetensors files as raw bytes: headers read and written, dtype strings mapped to numpy/MLX.

The pack copies tensors byte for byte (store/pack.py) and the readers view them in place, so
nothing here loads tensor data: `read_safetensors_header` says where each tensor's bytes are,
`safetensors_header_bytes` writes the header for tensors laid out back to back;
`write_safetensors` saves MLX arrays as mlx-lm does, never leaving a half-written file. Try it:
`python -c "from specdec.store.safetensors import read_safetensors_header as r; print(r('PACKED/model.safetensors')[0][:3])"`
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.core.errors import StoreError
from specdec.core.files import write_with

# safetensors dtype string -> (numpy dtype used to hold the bytes, itemsize)
ST_DTYPES: dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "uint16",  # numpy has no bfloat16: the bytes are held as uint16
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}


def dtype_itemsize(dtype: str) -> int:
    """Bytes per element of a safetensors dtype string ('BF16' -> 2)."""
    return np.dtype(np_dtype(dtype)).itemsize


def np_dtype(dtype: str) -> str:
    """numpy dtype that holds a safetensors dtype's bytes ('BF16' -> 'uint16')."""
    if dtype not in ST_DTYPES:
        raise StoreError(f"unsupported tensor dtype {dtype!r}; supported: {sorted(ST_DTYPES)}")
    return ST_DTYPES[dtype]


def mx_dtype(dtype: str):
    """The mx.Dtype of a safetensors dtype string ('BF16' -> mx.bfloat16)."""
    import mlx.core as mx

    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
    names.update({k: v for k, v in ST_DTYPES.items() if k[0] in "IU"})
    names["BOOL"] = "bool_"
    np_dtype(dtype)  # raises for unknown dtypes
    return getattr(mx, names[dtype])


def safetensors_dtype(a, name: str) -> str:
    """The safetensors dtype string of MLX array `a`, tensor `name` (mx.bfloat16 -> 'BF16')."""
    for dtype in ST_DTYPES:
        if mx_dtype(dtype) == a.dtype:
            return dtype
    raise StoreError(
        f"tensor {name} is {str(a.dtype).removeprefix('mlx.core.')}, which safetensors cannot "
        "hold: convert the model to float16, bfloat16 or float32 (mlx_lm.convert --dtype)"
    )


def mlx_write_error(path: str | os.PathLike, e: RuntimeError) -> StoreError | None:
    """The one-line error for MLX's report of a failed write(2) (a full disk, a file size
    limit): RuntimeError('[write] Unable to write N bytes to file.'); None for any other."""
    if "[write]" not in str(e):
        return None
    return StoreError(
        f"{path}: cannot write ({e}); the disk may be full: free space or write elsewhere"
    )


def write_safetensors(path: str | os.PathLike, weights: dict) -> Path:
    """Save `weights` (name -> mx.array) at `path` as mlx-lm does (metadata format: mlx), under
    a temporary name first, then durable_replace: a killed or failed write leaves `path` as it
    was, and no temporary behind."""
    import mlx.core as mx

    try:
        return write_with(  # MLX adds .safetensors to a name without it
            path,
            lambda tmp: mx.save_safetensors(str(tmp), weights, metadata={"format": "mlx"}),
            suffix=".safetensors",
        )
    except RuntimeError as e:
        raise (mlx_write_error(path, e) or e) from None


@dataclass(frozen=True)
class SafeTensor:
    """One tensor inside a safetensors file: where its raw bytes are."""

    name: str
    dtype: str  # safetensors dtype string, e.g. 'BF16', 'U32'
    shape: tuple[int, ...]
    path: Path
    offset: int  # absolute byte offset of the data in `path`
    nbytes: int


MAX_HEADER = 100_000_000  # the reference parser's limit on the header's JSON
# the fix for a damaged file, whatever the damage
AGAIN = "; copy the model again (in a packed directory: re-pack with `specdec pack --force`)"


def read_safetensors_header(path: Path) -> tuple[list[SafeTensor], dict[str, str]]:
    """Parse a safetensors header without loading any data: (tensors, metadata), in file order.

    As strict as the reference parser (the safetensors crate): the header is a JSON object,
    every tensor has a known dtype, a shape of non-negative integers and two data offsets whose
    span is exactly shape x dtype size, and the tensors tile the data buffer in order, from 0
    to the end of the file, without gaps or overlaps. A file that breaks any of this is refused
    with one line naming the tensor; nothing reads its bytes as weights.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise StoreError(f"{path}: not a safetensors file (shorter than 8 bytes){AGAIN}")
            (n,) = struct.unpack("<Q", head)
            size = os.fstat(f.fileno()).st_size
            if n > size - 8 or n > MAX_HEADER:
                raise StoreError(
                    f"{path}: safetensors header length {n} exceeds the file size (truncated?)"
                    + AGAIN
                )
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        raise StoreError(f"{path}: cannot read safetensors header ({e}){AGAIN}") from e
    if not isinstance(header, dict):
        raise _bad(path, f"the header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, "__metadata__ is not an object of strings")
    tensors = [_tensor(path, 8 + n, name, info) for name, info in header.items()]
    tensors.sort(key=lambda t: (t.offset, t.nbytes))
    pos = 8 + n  # where the next tensor must begin: the buffer is tiled without gaps
    for t in tensors:
        if t.offset != pos:
            what = "overlaps the tensor before it" if t.offset < pos else "leaves a gap before it"
            raise _bad(path, f"tensor {t.name} {what} (data_offsets out of order)")
        pos = t.offset + t.nbytes
    if pos > size:
        raise StoreError(
            f"{path}: tensor {tensors[-1].name} runs past the end of the file (truncated?){AGAIN}"
        )
    if pos < size:
        raise _bad(path, f"{size - pos} bytes after the last tensor belong to no tensor")
    return tensors, meta


def _bad(path: Path, problem: str) -> StoreError:
    return StoreError(f"{path}: malformed safetensors header: {problem}{AGAIN}")


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _tensor(path: Path, base: int, name: str, info: Any) -> SafeTensor:
    """One header entry, checked: dtype known, shape and offsets non-negative integers whose
    span is the shape's byte size."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise _bad(path, f"tensor {name} lacks dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ST_DTYPES:  # a list is not even hashable
        raise _bad(path, f"tensor {name} has dtype {dtype!r}, not one of {sorted(ST_DTYPES)}")
    if not isinstance(shape, list) or not all(map(_is_count, shape)):
        raise _bad(path, f"tensor {name} has shape {shape!r}, not a list of integers >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets)):
        raise _bad(path, f"tensor {name} has data_offsets {offsets!r}, not [begin, end] >= 0")
    begin, end = offsets
    want = int(np.prod(shape, dtype=object)) * dtype_itemsize(dtype)
    if end - begin != want:
        raise _bad(
            path,
            f"tensor {name} is {dtype} {shape} ({want} bytes) but its data_offsets "
            f"{offsets} span {end - begin}",
        )
    return SafeTensor(name, dtype, tuple(shape), path, base + begin, end - begin)


def safetensors_header_bytes(
    entries: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str]
) -> bytes:
    """Header (length prefix included) for tensors laid out back to back in the given order.

    entries: (name, dtype, shape, nbytes). Padded with spaces so the data starts 8-aligned,
    as the safetensors spec asks.
    """
    header: dict[str, Any] = {"__metadata__": metadata}
    pos = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
