"""The fast BLAS is a speed-up only: exactness holds under MLX's own reference BLAS too."""

from __future__ import annotations

import os
import subprocess
import sys

from specdec.blas import active_blas, find_fast_blas
from tests.helpers import random_checkpoint

CHECK = """
import sys, numpy as np, mlx.core as mx
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache
from specdec.blas import active_blas
from specdec.model.loader import load
src = sys.argv[1]
ref, _ = mlx_load(src)
sm = load(src, budget="30%", io="buffered", with_mtp=False)
c1, c2 = make_prompt_cache(ref), make_prompt_cache(sm.model)
toks = [[5, 9, 17, 33, 65, 129, 257, 7]] + [[t] for t in (3, 11, 19, 23)]
worst = max(float(np.abs(np.array(ref(mx.array([t]), cache=c1)) -
                         np.array(sm.model(mx.array([t]), cache=c2))).max()) for t in toks)
print(active_blas(), worst, sm.streamer.cache.misses)
"""


def test_exact_under_reference_blas(tmp_path):
    src = random_checkpoint(tmp_path, "qwen3_moe", None)
    env = {**os.environ, "SPECDEC_BLAS": "reference", "SPECDEC_CACHE": str(tmp_path / "c")}
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(
        [sys.executable, "-c", CHECK, str(src)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    blas, worst, misses = out.stdout.split()
    assert blas == "reference"
    assert float(worst) == 0.0 and int(misses) > 0


def test_this_process_runs_the_fast_blas_when_one_is_installed():
    if find_fast_blas() is None:
        assert active_blas() in ("reference", "accelerate")
    else:
        assert active_blas().startswith("openblas:")
