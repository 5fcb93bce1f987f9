#!/usr/bin/env bash
# Set up specdec in ./.venv: Python packages, and on Debian/Ubuntu the OpenBLAS that MLX's CPU
# build uses through specdec.core.blas (50x faster matmuls than the reference BLAS mlx[cpu] bundles;
# results do not depend on it). Idempotent: a second run only checks.
#   bash scripts/setup.sh            # then: .venv/bin/specdec --help
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
echo "setup: ready ($(.venv/bin/python -c 'import mlx.core as mx; print("mlx", mx.__version__)'))"
