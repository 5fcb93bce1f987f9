"""Importing specdec keeps MLX's CUDA attention off cuDNN (MLX_CUDA_USE_CUDNN_SDPA=0,
specdec/core/attention.py) unless the user chose otherwise: each case in a fresh process, as MLX
reads the variable once a process.

Run: `pytest tests/core/test_cudnn_sdpa_default.py`.
"""

import os
import subprocess
import sys

import pytest

READ = "import os, specdec; print(os.environ['MLX_CUDA_USE_CUDNN_SDPA'])"


@pytest.mark.parametrize(("exported", "expected"), [(None, "0"), ("1", "1"), ("0", "0")])
def test_importing_specdec_sets_the_default_and_keeps_a_users_value(exported, expected):
    env = {k: v for k, v in os.environ.items() if k != "MLX_CUDA_USE_CUDNN_SDPA"}
    if exported is not None:
        env["MLX_CUDA_USE_CUDNN_SDPA"] = exported
    got = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == expected
