#!/usr/bin/env bash
# Set up specdec in ./.venv: Python packages, and on Debian/Ubuntu the OpenBLAS that MLX's CPU
# build uses through specdec.core.blas (50x faster matmuls than the reference BLAS mlx[cpu] bundles;
# results do not depend on it). Idempotent: a second run only checks.
#   bash scripts/setup.sh                          # then: .venv/bin/specdec --help
#   SPECDEC_BACKEND=cuda bash scripts/setup.sh     # Linux + NVIDIA: MLX's CUDA backend
# The CUDA backend is MLX's `mlx-cuda-13` package in place of `mlx-cpu` (same version as mlx): it
# needs an NVIDIA driver for CUDA 13 and the CUDA 13 libraries (cuBLAS, cuDNN 9, NVRTC, ...), which
# pip brings as nvidia-* packages or which an existing PyTorch CUDA install already has.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" = Linux ] && ! ls /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing OpenBLAS (libopenblas0-pthread)"
    (apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq libopenblas0-pthread; }) >/dev/null
  else
    echo "setup: note: no OpenBLAS found; MLX will use its slow reference BLAS." \
      "Install libopenblas0-pthread (or set SPECDEC_BLAS=/path/to/libopenblas.so)." >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import specdec, mlx.core, mlx_lm, hydra, wandb, pytest" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.specdec-installed ]; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch .venv/.specdec-installed
fi
if [ "${SPECDEC_BACKEND:-cpu}" = cuda ] && ! .venv/bin/python -m pip show -q mlx-cuda-13 >/dev/null 2>&1; then
  v=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mlx"))')
  echo "setup: MLX's CUDA backend (mlx-cuda-13 $v in place of mlx-cpu)"
  .venv/bin/python -m pip uninstall -q -y mlx-cpu
  .venv/bin/python -m pip install -q "mlx-cuda-13==$v"
fi
echo "setup: ready ($(.venv/bin/python -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())'))"
