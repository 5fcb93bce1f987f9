"""CudaCopy: lands a block read into pinned host memory in arena slots with the GPU's copy engine.

    copy = CudaCopy()                      # CUDA's driver API (libcuda.so.1, which MLX loads)
    copy.pin(staging)                      # page-locks a reader thread's staging buffer
    copy.land(staging, pieces)             # staging -> the slot's segments, on the GPU; waits
    copy.close()                           # unpins and frees what it made

What `--io pinned` reads through (specdec.store.reader). On MLX's CUDA backend the arena is CUDA
managed memory: a slot's pages live on the GPU once its experts have run, so O_DIRECT into the
slot first faults every page back to the host, and the first kernel after the read faults them
forward again (`land_gbps`, measured 9-13 GB/s on an H200; docs/results/cuda.md). Here the block
is read with O_DIRECT into the reading thread's page-locked staging buffer and copied into the
slot by DMA on that thread's own non-blocking stream: the slot's pages stay where they are, and
neither direction migrates by faults. The copy is waited for before the block counts as read,
so a kernel launched after the read sees it (the same contract as a host write), and it never
waits on the kernels MLX has queued on its own streams (a non-blocking stream does not
synchronize with the legacy default stream). Which slot may be written while kernels run is the
caller's rule, unchanged (specdec.stream.source: the slot-safety flush).

The driver API rather than the runtime's: MLX links libcudart statically and libcuda.so.1
dynamically, so the driver is the one library both share, with one primary context per device.
Only a CUDA machine can run this; CPU tests drive the reader's pinned path through a named
stand-in (tests/helpers.py HostCopyStandIn, in tests/store/test_store_roundtrip.py), and
`python benchmarks/bench_cuda.py pinned` runs it for real: the blocks it lands compared on the GPU
with the file, its reads and landing against `--io direct` (docs/results/cuda.md).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from specdec.core.errors import StoreError

CU_MEMHOSTREGISTER_PORTABLE = 0x01  # pinned for every context, not only the registering one
CU_STREAM_NON_BLOCKING = 0x01  # no implicit ordering with the legacy default stream


class CudaCopy:
    """Page-locked staging and copy-engine copies into CUDA (managed) memory, thread-safe: each
    calling thread gets its own stream, made current on the device's primary context."""

    def __init__(self, device: int = 0) -> None:
        try:
            self._cu = ctypes.CDLL("libcuda.so.1")
        except OSError:
            raise StoreError(
                "--io pinned copies blocks with CUDA's driver (libcuda.so.1), not found here; "
                "use --io direct (pinned reads need MLX's CUDA backend)"
            ) from None
        self._check("cuInit", 0)
        dev = ctypes.c_int()
        self._check("cuDeviceGet", ctypes.byref(dev), device)
        self._dev = dev.value
        self._ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(self._ctx), self._dev)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._streams: list[ctypes.c_void_p] = []
        self._pinned: dict[int, int] = {}  # address -> bytes page-locked

    def _check(self, name: str, *args) -> None:
        err = getattr(self._cu, name)(*args)
        if err:
            text = ctypes.c_char_p()
            self._cu.cuGetErrorString(err, ctypes.byref(text))
            why = text.value.decode() if text.value else f"error {err}"
            raise StoreError(f"CUDA {name} failed: {why}; use --io direct")

    def _stream(self) -> ctypes.c_void_p:
        """This thread's stream, the primary context made current on first use."""
        stream = getattr(self._local, "stream", None)
        if stream is None:
            self._check("cuCtxSetCurrent", self._ctx)
            stream = ctypes.c_void_p()
            self._check("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
            self._local.stream = stream
            with self._lock:
                self._streams.append(stream)
        return stream

    def pin(self, buf: np.ndarray) -> None:
        """Page-lock `buf` (contiguous) until `unpin` or `close`: DMA reads it directly."""
        self._stream()  # the context current on this thread first
        addr = buf.ctypes.data
        self._check(
            "cuMemHostRegister_v2",
            ctypes.c_void_p(addr),
            ctypes.c_size_t(buf.nbytes),
            CU_MEMHOSTREGISTER_PORTABLE,
        )
        with self._lock:
            self._pinned[addr] = buf.nbytes

    def unpin(self, buf: np.ndarray) -> None:
        with self._lock:
            if self._pinned.pop(buf.ctypes.data, None) is None:
                return
        self._check("cuMemHostUnregister", ctypes.c_void_p(buf.ctypes.data))

    def land(self, src: np.ndarray, pieces: list[np.ndarray]) -> None:
        """Copy consecutive bytes of `src` (pinned) into the pieces, in order, by DMA on this
        thread's stream; returns once every byte is in place."""
        stream, at = self._stream(), 0
        for piece in pieces:
            n = piece.nbytes
            self._check(
                "cuMemcpyAsync",
                ctypes.c_void_p(piece.ctypes.data),
                ctypes.c_void_p(src.ctypes.data + at),
                ctypes.c_size_t(n),
                stream,
            )
            at += n
        self._check("cuStreamSynchronize", stream)

    def close(self) -> None:
        """Unpin every buffer and destroy the streams (each thread's copies have completed:
        `land` waits for its own)."""
        self._check("cuCtxSetCurrent", self._ctx)
        with self._lock:
            pinned, self._pinned = self._pinned, {}
            streams, self._streams = self._streams, []
        for addr in pinned:
            self._check("cuMemHostUnregister", ctypes.c_void_p(addr))
        for stream in streams:
            self._check("cuStreamDestroy_v2", stream)
        self._check("cuDevicePrimaryCtxRelease_v2", self._dev)
