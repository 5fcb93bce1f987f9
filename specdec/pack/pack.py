"""`specdec pack MODEL_DIR OUT_DIR`: turn an mlx-lm model directory into a packed directory.

Reads the safetensors headers of `model*.safetensors` (and `mtp.safetensors`, the DeepSeek MTP
layer stored as `model.layers.{num_hidden_layers}.*`), then copies raw bytes, tensor by tensor:
routed-expert tensors (mlx-lm's stacked `...switch_mlp.<proj>.<weight|scales|biases>` [E, ...])
are cut per expert into one aligned block per (layer, expert) in experts.bin; everything else goes
unchanged into model.safetensors (the MTP layer's into mtp.safetensors). The bytes go through
`store/copypipe.py`: chunks of whole expert blocks (~32 MB), each stacked tensor's slices for a
chunk's experts read in one sequential O_DIRECT read, crc32 and O_DIRECT writes on a writer
thread, a few chunks in flight; memory stays bounded by those buffers whatever the checkpoint
size (`python benchmarks/bench_pack.py`: peak RSS and speed against `cp` and `dd`). The layout
is in `store/layout.py`.

Everything is written into `OUT_DIR.tmp-<pid>` (marked `.specdec-pack` first thing, see
store/files.py) and renamed at the end, fsynced, with experts.json written last: a killed pack
never leaves a directory that looks valid, and the next pack deletes the `.tmp-<pid>` /
`.old-<pid>` directories of dead packs, recognised by their marker, never by name alone. tests/e2e/test_interrupt.py kills the real
CLI at each stage (SPECDEC_TEST_PACK_STALL=<stage> makes pack announce the stage on stderr and
wait there to be killed; stages: resident, block:N, experts, index, swap, swapped). An existing OUT_DIR packed from the
same files is kept if a quick check passes (sizes, index, a sample of block checksums) and
re-packed if not; another pack there is replaced only with `--force`, and a directory pack did
not write (no marker), or one that holds the model itself, never (store/pack_guard.py).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from specdec.checkpoint.discover import expert_matcher
from specdec.core.errors import StoreError
from specdec.core.files import (
    MARKER_PREFIX,
    check_readable,
    check_replaceable,
    fresh_dir,
    swap_dir,
    write_error,
)
from specdec.core.progress import progress
from specdec.pack.copypipe import Chunk, Piece, open_source, write_chunks
from specdec.pack.guard import (
    LOCK_SUFFIX,
    PACK_KIND,
    check_out_dir,
    pack_lock,
    remove_stale_tmp,
)
from specdec.pack.requantize import ColdSpec, requantize_cold
from specdec.store.layout import (
    ALIGN,
    EXPERTS_BIN,
    EXPERTS_JSON,
    INDEX_VERSION,
    MTP_FILE,
    RESIDENT,
    TENSOR_ALIGN,
    ExpertIndex,
    LayerLayout,
    Quant,
    ResidentTensor,
    TensorSpec,
    round_up,
)
from specdec.store.safetensors import SafeTensor, read_safetensors_header, safetensors_header_bytes

CHUNK = 32 << 20  # bytes per read/write: large sequential I/O, a few in flight
_SKIP_COPY = {"model.safetensors.index.json"}


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's safetensors files, in a fixed order (MTP file last)."""
    if not (model_dir / "config.json").is_file():
        raise StoreError(
            f"{model_dir}: no config.json; MODEL_DIR must be an mlx-lm model directory "
            "(make one with `mlx_lm.convert` or `specdec make-random`)"
        )
    files = sorted(model_dir.glob("model*.safetensors"))
    if not files:
        raise StoreError(f"{model_dir}: no model*.safetensors files; is this an mlx-lm model dir?")
    if (model_dir / MTP_FILE).is_file():
        files.append(model_dir / MTP_FILE)
    return files


def source_files(model_dir: Path) -> list[Path]:
    """Every file a pack is made from: the weights, and what it copies as is (config.json, the
    tokenizer files, chat templates, special_tokens_map.json, ...)."""
    return [*weight_files(model_dir), *(f for f in sorted(model_dir.iterdir()) if _copied(f))]


def source_fingerprint(model_dir: Path) -> dict[str, Any]:
    """What a pack was made from: re-running pack on unchanged files is a no-op, and a changed
    tokenizer or chat template is re-packed like a changed weight."""
    files = source_files(model_dir)
    return {
        "model_dir": str(model_dir.resolve()),
        "files": {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files},
    }


def _quant_of(prefix: str, proj: str, names: set[str], config: dict) -> Quant | None:
    """Quantization of one projection from config.json (mlx-lm's `quantization` section)."""
    qcfg = config.get("quantization") or config.get("quantization_config")
    quantized = f"{proj}.scales" in names
    if not quantized:
        return None
    if not isinstance(qcfg, dict) or "bits" not in qcfg:
        raise StoreError(
            f"{prefix}.{proj} has scales but config.json has no `quantization` section; "
            "re-quantize with `mlx_lm.convert -q`"
        )
    override = qcfg.get(f"{prefix}.{proj}")
    q = override if isinstance(override, dict) else qcfg
    return Quant(
        bits=int(q.get("bits", qcfg["bits"])),
        group_size=int(q.get("group_size", qcfg.get("group_size", 64))),
        mode=str(q.get("mode", qcfg.get("mode", "affine"))),
    )


def _config(model_dir: Path) -> dict:
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except ValueError as e:
        raise StoreError(
            f"{model_dir}/config.json is not valid JSON ({e}); restore it from the original model"
        ) from None
    if not isinstance(config, dict):
        raise StoreError(f"{model_dir}/config.json is not a JSON object; restore it")
    return config


def plan(model_dir: Path) -> tuple[list[SafeTensor], dict[int, tuple[LayerLayout, dict]]]:
    """Split the checkpoint's tensors: (resident tensors, {layer: (layout, {name: source})}).

    Layout offsets are laid out layer-major, expert-minor; crc32s are filled in while packing.
    """
    config = _config(model_dir)
    match = expert_matcher(
        config, f"{model_dir}/config.json"
    )  # from the family's mlx-lm module tree, not from its name
    resident: list[SafeTensor] = []
    experts: dict[int, dict[str, SafeTensor]] = {}
    prefixes: dict[int, str] = {}
    seen: set[str] = set()
    for path in weight_files(model_dir):
        for t in read_safetensors_header(path)[0]:
            if t.name in seen:
                raise StoreError(f"{model_dir}: tensor {t.name} appears in two safetensors files")
            seen.add(t.name)
            m = match(t.name)
            if m is None:
                resident.append(t)
                continue
            layer, prefix, name = m
            if name.endswith(".global_scale"):  # gather_qmm on arena views takes none yet
                raise StoreError(
                    f"{t.name}: experts quantized with a per-expert global scale (nvfp4) are "
                    "not streamed yet; convert with another quantization mode (affine, mxfp4)"
                )
            if prefixes.setdefault(layer, prefix) != prefix:
                raise StoreError(f"layer {layer} has experts under two prefixes: {prefix}")
            experts.setdefault(layer, {})[name] = t
    if not experts:
        raise StoreError(
            f"{model_dir}: no routed-expert tensors found (mlx-lm's {config.get('model_type')} "
            "keeps them in SwitchGLU/SwitchMLP layers, none of whose weights are in the "
            "safetensors files); pack needs an MoE checkpoint in mlx-lm layout (convert with "
            "`mlx_lm.convert`)"
        )
    layers: dict[int, tuple[LayerLayout, dict]] = {}
    file_pos = 0
    for lid in sorted(experts):
        srcs = dict(sorted(experts[lid].items()))
        n_experts = {t.shape[0] for t in srcs.values()}
        if len(n_experts) != 1:
            raise StoreError(
                f"layer {lid}: expert tensors disagree on the expert count {n_experts}"
            )
        (E,) = n_experts
        specs, pos = [], 0
        for name, t in srcs.items():
            if t.nbytes % E:
                raise StoreError(f"{t.name}: {t.nbytes} bytes do not split into {E} experts")
            specs.append(TensorSpec(name, t.dtype, t.shape[1:], pos, t.nbytes // E))
            pos = round_up(pos + t.nbytes // E, TENSOR_ALIGN)
        block = round_up(pos, ALIGN)
        names = set(srcs)
        projs = sorted({n.rsplit(".", 1)[0] for n in names})
        layout = LayerLayout(
            prefix=prefixes[lid],
            n_experts=E,
            block_bytes=block,
            tensors=specs,
            offsets=file_pos + block * np.arange(E, dtype=np.int64),
            crc32=np.zeros(E, dtype=np.uint32),
            quant={p: _quant_of(prefixes[lid], p, names, config) for p in projs},
        )
        file_pos += block * E
        layers[lid] = (layout, srcs)
    return resident, layers


class _Sources:
    """Open file descriptors of the source safetensors files, closed together."""

    def __init__(self) -> None:
        self.fds: dict[Path, int] = {}

    def fd(self, path: Path) -> int:
        if path not in self.fds:
            self.fds[path] = open_source(path)
        return self.fds[path]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


def _what(t: SafeTensor) -> str:
    return f"{t.name} in {Path(t.path).name}"


def _resident_chunks(tensors: list[SafeTensor], header: bytes, src: _Sources) -> Iterator[Chunk]:
    """model.safetensors as CHUNK-sized chunks: the header, then each tensor's bytes in turn;
    each chunk checksums its part of each tensor (crc key: the tensor's position)."""
    pieces, pos = [Piece(0, len(header), data=header)], len(header)
    for t in tensors:
        pieces.append(Piece(pos, t.nbytes, src.fd(t.path), t.offset, _what(t)))
        pos += t.nbytes
    for start in range(0, pos, CHUNK):
        end = min(start + CHUNK, pos)
        inside, crcs = [], []
        for i, p in enumerate(pieces):  # the part of each piece inside [start, end), chunk-relative
            a, b = max(p.dst, start), min(p.dst + p.nbytes, end)
            if a < b:
                cut = a - p.dst
                data = None if p.data is None else p.data[cut : cut + b - a]
                inside.append(Piece(a - start, b - a, p.fd, p.src + cut, p.what, data))
                if i:  # piece 0 is the header
                    crcs.append((a - start, b - a, i - 1))
        yield Chunk(start, end - start, inside, crcs)


def _write_resident(tensors: list[SafeTensor], path: Path, src: _Sources) -> list[ResidentTensor]:
    """Write the tensors' bytes as one safetensors file; returns what it holds, checksummed."""
    tensors = sorted(tensors, key=lambda t: t.name)
    header = safetensors_header_bytes(
        [(t.name, t.dtype, t.shape, t.nbytes) for t in tensors], {"format": "mlx"}
    )
    crc = [0] * len(tensors)  # a tensor of 0 bytes is in no chunk: crc32 of nothing

    def done(chunk: Chunk, crcs: list[int]) -> None:
        for (_, _, i), value in zip(chunk.crc_ranges, crcs, strict=True):
            crc[i] = value  # the running crc32: the last chunk's is the whole tensor's

    write_chunks(path, _resident_chunks(tensors, header, src), done, CHUNK, direct=True)
    return [ResidentTensor(t.name, t.dtype, t.shape, c) for t, c in zip(tensors, crc, strict=True)]


def _expert_chunks(layers: dict[int, tuple[LayerLayout, dict]], src: _Sources) -> Iterator[Chunk]:
    """experts.bin as chunks of whole blocks of one layer; tag = (layer, first expert).

    A chunk holds G experts, so each stacked source tensor contributes G adjacent slices: one
    sequential read scattered into the G blocks. Padding inside blocks is left zero.
    """
    for lid, (layout, srcs) in sorted(layers.items()):
        per_chunk = max(1, CHUNK // layout.block_bytes)
        for e0 in range(0, layout.n_experts, per_chunk):
            n = min(per_chunk, layout.n_experts - e0)
            pieces = [
                Piece(
                    i * layout.block_bytes + spec.offset,
                    spec.nbytes,
                    src.fd(srcs[spec.name].path),
                    srcs[spec.name].offset + (e0 + i) * spec.nbytes,
                    _what(srcs[spec.name]),
                )
                for spec in layout.tensors
                for i in range(n)
            ]
            crcs = [(i * layout.block_bytes, layout.block_bytes) for i in range(n)]
            offset = int(layout.offsets[e0])
            yield Chunk(offset, n * layout.block_bytes, pieces, crcs, (lid, e0))


def _write_experts(
    layers: dict[int, tuple[LayerLayout, dict]],
    path: Path,
    src: _Sources,
    on_block: Callable[[int, int], None] | None,
) -> None:
    written = [0]
    total = sum(layout.block_bytes * layout.n_experts for layout, _ in layers.values())
    bar = progress(total=total, desc="pack experts", unit="B")
    bar.unit_scale = True  # bytes as kB, MB, GB

    def done(chunk: Chunk, crcs: list[int]) -> None:
        lid, e0 = chunk.tag
        layout = layers[lid][0]
        bar.update(len(crcs) * layout.block_bytes)
        for i, crc in enumerate(crcs):
            layout.crc32[e0 + i] = crc
            if on_block is not None:
                on_block(lid, e0 + i)
            _stall(f"block:{written[0]}")  # blocks are numbered across layers
            written[0] += 1

    max_chunk = max(
        layout.block_bytes * max(1, CHUNK // layout.block_bytes) for layout, _ in layers.values()
    )
    with bar:
        write_chunks(path, _expert_chunks(layers, src), done, max_chunk, direct=True)


def _copied(f: Path) -> bool:
    """Files of the model directory copied as they are (config, tokenizer; not its marker, nor
    the lock of a pack into a folder inside it, which would change its fingerprint)."""
    return (
        f.is_file()
        and f.suffix != ".safetensors"
        and f.name not in _SKIP_COPY
        and not f.name.startswith(MARKER_PREFIX)
        and not (f.name.startswith(".") and f.name.endswith(LOCK_SUFFIX))
    )


def _stall(stage: str) -> None:
    """Test-only: with SPECDEC_TEST_PACK_STALL=<stage>, say so on stderr and wait to be killed."""
    if os.environ.get("SPECDEC_TEST_PACK_STALL") == stage:
        print(f"specdec: test: pack stalled at {stage}", file=sys.stderr, flush=True)
        time.sleep(600)


def pack(
    model_dir: str | Path,
    out_dir: str | Path,
    force: bool = False,
    on_block: Callable[[int, int], None] | None = None,
    cold_bits: int | None = None,
    hotlist: list[tuple[int, int]] | None = None,
    hot_access_share: float | None = None,
) -> Path:
    """Pack model_dir into out_dir; returns out_dir. `on_block(layer, expert)` is a test hook.
    cold_bits: requantize every routed expert not in `hotlist` ((layer, expert) pairs) to
    that many bits (store/requantize.py); the hotlist's keep their precision. hot_access_share:
    the share of routed accesses the hotlist's experts took when profiled; recorded, it sets how
    a budget is split over the two block sizes (store/pools.py).

    One pack per OUT_DIR at a time (an flock on `.OUT_DIR.pack-lock` beside it, released by the
    kernel if the holder dies): a second pack of the same model, e.g. two runs packing into the
    cache on first use, waits and then finds the first one's pack.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not model_dir.is_dir():
        raise StoreError(
            f"{model_dir}: no such model directory; give an mlx-lm model directory "
            "(made by `mlx_lm.convert` or `specdec make-random`)"
        )
    check_readable(model_dir)
    if any(
        (model_dir / f).exists() or (model_dir / f).is_symlink()
        for f in (EXPERTS_JSON, EXPERTS_BIN)
    ):
        raise StoreError(
            f"{model_dir} is already a packed directory: use it directly (--model {model_dir}), "
            "or pack the mlx-lm model directory it was packed from"
        )
    # refusals first, so a refused OUT_DIR does not even get a lock file beside it; again under
    # the lock, as another process may have written OUT_DIR meanwhile
    mixed = ColdSpec.of(cold_bits, hotlist, hot_access_share)
    check_replaceable(out_dir, PACK_KIND, model_dir, "`specdec pack`", "--force")
    with pack_lock(out_dir):
        return _pack(model_dir, out_dir, force, on_block, mixed)


def _pack(
    model_dir: Path,
    out_dir: Path,
    force: bool,
    on_block: Callable[[int, int], None] | None,
    mixed: ColdSpec | None,
) -> Path:
    fingerprint = source_fingerprint(model_dir)
    if mixed is not None:  # a mixed pack is another pack of the same files
        fingerprint["cold"] = mixed.fingerprint()
    remove_stale_tmp(out_dir)
    if check_out_dir(model_dir, out_dir, force, fingerprint):
        return out_dir  # already packed from these very files, and sound
    resident, layers = plan(model_dir)
    expert_layouts = {lid: ly for lid, (ly, _) in layers.items()}
    cold = mixed.pairs(expert_layouts) if mixed else None
    tmp = fresh_dir(out_dir, PACK_KIND)
    src = _Sources()
    try:
        for f in source_files(model_dir):
            if _copied(f):
                shutil.copy2(f, tmp / f.name)
        # Resident tensors keep the source's file split: mlx-lm's loader globs model*.safetensors,
        # and the MTP layer (not a parameter of mlx-lm's model) stays in mtp.safetensors.
        mtp = [t for t in resident if Path(t.path).name == MTP_FILE]
        main = [t for t in resident if Path(t.path).name != MTP_FILE]
        written = {RESIDENT: _write_resident(main, tmp / RESIDENT, src)}
        if mtp:
            written[MTP_FILE] = _write_resident(mtp, tmp / MTP_FILE, src)
        _stall("resident")
        _write_experts(layers, tmp / EXPERTS_BIN, src, on_block)
        if cold:
            requantize_cold(tmp / EXPERTS_BIN, expert_layouts, cold, mixed.bits)
        index = ExpertIndex(
            version=INDEX_VERSION,
            slot_bytes=max(layout.block_bytes for layout, _ in layers.values()),
            layers={lid: layout for lid, (layout, _) in layers.items()},
            source=fingerprint,
            resident=written,
        )
        # what pack built from the headers: a problem here is the checkpoint's, not a pack's
        index.validate(
            f"{model_dir}: the experts its safetensors headers describe",
            "the headers disagree with the model (edited?); copy or convert the model again",
        )
        _stall("experts")
        index.save(tmp)  # last: its presence marks a complete pack
        _stall("index")
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise write_error(out_dir, e) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        src.close()
    swap_dir(tmp, out_dir, PACK_KIND, _stall)  # durable rename, old pack goes
    return out_dir
