"""Fast BLAS for MLX on Linux, without touching correctness.

The `mlx[cpu]` wheel links the reference BLAS it bundles (about 5 GFLOP/s for a float32 matmul
on our 2-core machines). OpenBLAS exports the same `cblas_*`/`sgemm_` symbols, so putting it
first with LD_PRELOAD makes MLX's matmuls ~50x faster with no rebuild. LD_PRELOAD only works at
process start, so entry points (the `specdec` CLI, `specdec-exp`, pytest's conftest) call
`ensure_fast_blas()` first: if a fast BLAS is found and not yet loaded, the process re-executes
itself once with LD_PRELOAD set.

Control with SPECDEC_BLAS:
  auto (default)  use OpenBLAS when found (Debian/Ubuntu: `apt-get install libopenblas0-pthread`)
  reference       keep MLX's bundled reference BLAS (what CI's exactness check also runs)
  /path/lib.so    preload this library (a missing file is a one-line error)

Results never depend on it: exactness tests compare streamed and resident models under the same
BLAS, and one test repeats the exactness check under the reference BLAS. Every run records
`active_blas()` next to its results. On macOS MLX uses Accelerate and this module does nothing.
"""

from __future__ import annotations

import os
import sys

from specdec.core.errors import SpecdecError

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
_REEXEC_FLAG = "_SPECDEC_BLAS_REEXEC"


def find_fast_blas() -> str | None:
    """Path of the BLAS library to preload, or None (reference BLAS, or not on Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    mode = os.environ.get("SPECDEC_BLAS", "auto")
    if mode == "reference":
        return None
    if mode != "auto":
        if not os.path.isfile(mode):  # a typo would silently run the slow reference BLAS
            raise SpecdecError(
                f"SPECDEC_BLAS={mode}: no such library file; set it to the path of a BLAS "
                "(libopenblas.so.0), to auto (find OpenBLAS) or reference (MLX's own), or unset it"
            )
        return mode
    return next((p for p in OPENBLAS_CANDIDATES if os.path.exists(p)), None)


def fast_blas_env() -> dict[str, str]:
    """This process's environment with the fast BLAS (if any) first in LD_PRELOAD: for a child
    process, or for the re-exec below."""
    env = dict(os.environ)
    lib = find_fast_blas()
    if lib and lib not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD")) if p)
    return env


def ensure_fast_blas() -> None:
    """Re-execute this process once with the fast BLAS preloaded, if one is available."""
    lib = find_fast_blas()
    if lib is None or os.environ.get(_REEXEC_FLAG) or lib in os.environ.get("LD_PRELOAD", ""):
        return
    env = fast_blas_env()
    env[_REEXEC_FLAG] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def active_blas() -> str:
    """Which BLAS this process has mapped: 'openblas:<path>', 'accelerate' or 'reference'."""
    if sys.platform == "darwin":
        return "accelerate"
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                # numpy/scipy wheels bundle a scipy_openblas with prefixed symbols: it cannot
                # serve MLX's cblas calls, so only an unprefixed libopenblas counts.
                if "libopenblas" in line and "scipy_openblas" not in line:
                    return "openblas:" + line.split()[-1]
    except OSError:
        pass
    return "reference"
