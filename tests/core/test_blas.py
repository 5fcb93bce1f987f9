"""The exactness contract under each BLAS this machine can run (tests/helpers.py states it).

Float experts are compared streamed vs resident in fresh processes: under MLX's reference BLAS
the logits must be equal bit for bit; under OpenBLAS with each of its x86 kernels this CPU can
run (AVX2 `Haswell`, AVX-512 `SkylakeX`, picked with OPENBLAS_CORETYPE, which Debian's
DYNAMIC_ARCH build honours) they must agree within LOGIT_ATOL and greedy tokens may part only at
a near-tie.
The AVX-512 kernel is the one that first broke bit-equality (issue 12), so it is tested here on
any machine that has it rather than only on the CI machine that happens to pick it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from specdec.core.blas import active_blas, find_fast_blas
from tests.helpers import FAMILIES, assert_greedy_match, assert_logits_match, random_checkpoint

CHECK = """
import json, sys, numpy as np, mlx.core as mx
from mlx_lm import load as mlx_load
from mlx_lm.models.cache import make_prompt_cache
from specdec.core.blas import active_blas
from specdec.stream.loader import load

def logits(m, toks, c):
    return np.array(m(mx.array([toks]), cache=c)[0].astype(mx.float32))  # [T, vocab]

out = {"blas": active_blas(), "families": {}}
for src in sys.argv[1:]:
    ref, _ = mlx_load(src)
    sm = load(src, budget="30%", io="buffered", with_mtp=False)
    c1, c2 = make_prompt_cache(ref), make_prompt_cache(sm.model)
    # the prompt of tests/stream/test_streamed_exact.py, where the AVX-512 kernel first differed
    prompt = np.random.default_rng(1).integers(0, ref.args.vocab_size, 16).tolist()
    worst, toks = 0.0, [prompt]
    greedy, scores = ([], []), []
    for _ in range(24):  # each model drives its own greedy continuation
        a, b = logits(ref, toks[0], c1), logits(sm.model, toks[-1], c2)
        if greedy[0] == greedy[1]:  # same prefix so far: the logits are comparable
            worst = max(worst, float(np.abs(a - b).max()))
        greedy[0].append(int(a[-1].argmax())), greedy[1].append(int(b[-1].argmax()))
        scores.append(a[-1].tolist())
        toks = [[greedy[0][-1]], [greedy[1][-1]]]
    out["families"][src] = {"worst": worst, "ref": greedy[0], "got": greedy[1],
                            "scores": scores, "misses": sm.streamer.cache.misses}
    sm.close()
print(json.dumps(out))
"""


def _blas_settings() -> list[tuple[str, dict[str, str]]]:
    """(name, env changes) for every BLAS configuration this machine can run."""
    settings = [("reference", {"SPECDEC_BLAS": "reference"})]
    if find_fast_blas() is None:
        return settings
    if platform.machine() in ("x86_64", "AMD64"):
        flags = open("/proc/cpuinfo").read()
        for kernel, flag in (("Haswell", " avx2"), ("SkylakeX", " avx512f")):
            if flag in flags:
                settings.append((f"openblas-{kernel}", {"OPENBLAS_CORETYPE": kernel}))
    else:
        settings.append(("openblas", {}))
    return settings


@pytest.fixture(scope="module")
def f32_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("blas")
    return [str(random_checkpoint(root, f, None)) for f in FAMILIES]


@pytest.mark.slow  # a fresh process per BLAS, five families each
@pytest.mark.parametrize(
    "name,env_changes", _blas_settings(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_exactness_contract_under_each_blas(f32_checkpoints, tmp_path, name, env_changes):
    env = {**os.environ, "SPECDEC_CACHE": str(tmp_path / "c"), **env_changes}
    env.pop("LD_PRELOAD", None)  # each process preloads (or not) for itself
    env.pop("_SPECDEC_BLAS_REEXEC", None)
    cmd = [
        sys.executable,
        "-c",
        "from specdec.core.blas import ensure_fast_blas as e; e()\n" + CHECK,
    ]
    out = subprocess.run(
        cmd + f32_checkpoints, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    blas = result["blas"]
    assert (blas == "reference") == (name == "reference"), blas
    for src, r in result["families"].items():
        assert_logits_match(r["worst"], None, f"{name} {src}", blas=blas)
        assert_greedy_match(r["got"], r["ref"], r["scores"], None, f"{name} {src}", blas=blas)
        assert r["misses"] > 0


def test_this_process_runs_the_fast_blas_when_one_is_installed():
    """The pytest plugin (specdec.core.pytest_blas) re-executed this process with the library
    find_fast_blas() finds preloaded: the suite runs on it. Fails under `-p no:specdec_blas`."""
    lib = find_fast_blas()
    if lib is None:
        assert active_blas() in ("reference", "accelerate")
        return
    real = os.path.realpath(lib)
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/" in line}
    assert real in mapped, (
        f"{lib} is installed but not mapped in the test process (BLAS: {active_blas()}, "
        f"LD_PRELOAD={os.environ.get('LD_PRELOAD')!r}): the specdec_blas plugin did not run"
    )
    if "libopenblas" in os.path.basename(real):
        assert active_blas() == "openblas:" + real
