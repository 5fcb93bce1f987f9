"""Every family's tiny random checkpoint opens with `mlx_lm.load` and generates.

Run: `pytest tests/checkpoint/test_random_models.py`. Also checks that routing is not degenerate (different
tokens pick different experts) and that unknown families give the one-line error. Loading and
generating is checked here for the first families, float and 4-bit; tests/checkpoint/test_families.py runs
every family make-random builds through mlx-lm and through specdec.
"""

from __future__ import annotations

import json

import mlx.core as mx
import mlx_lm
import pytest
from transformers import AutoTokenizer

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import SpecdecError
from tests.helpers import fast_cases

FIRST = ["deepseek_v3", "deepseek_v32", "glm4_moe", "minimax", "mixtral", "qwen2_moe", "qwen3_moe"]


@pytest.mark.parametrize("bits", [None, 4])
@pytest.mark.parametrize("family", fast_cases(FIRST))
def test_loads_and_generates(family, bits, tmp_path):
    out = make_random(family, tmp_path / family, bits=bits, seed=3)
    config = json.loads((out / "config.json").read_text())
    model, tokenizer = mlx_lm.load(str(out))
    assert tokenizer.vocab_size == config["vocab_size"]
    assert (config.get("quantization") or {}).get("bits") == bits
    text = mlx_lm.generate(model, tokenizer, "def add(a, b):", max_tokens=8)
    assert len(tokenizer.encode(text, add_special_tokens=False)) >= 1
    logits = model(mx.array([tokenizer.encode("import os\nprint(x)")]))
    assert bool(mx.isfinite(logits).all())


def test_routing_varies_across_tokens(tmp_path):
    """Random routers and correction biases: tokens must not all pick the same experts."""
    out = make_random("deepseek_v3", tmp_path / "m", seed=0)
    model, tokenizer = mlx_lm.load(str(out))
    layer = model.model.layers[1]
    h = model.model.embed_tokens(mx.array(tokenizer.encode("for i in range(10): print(i)")))
    inds, _ = layer.mlp.gate(layer.post_attention_layernorm(h))  # [T, k]
    picked = {tuple(sorted(row)) for row in inds.tolist()}
    assert len(picked) > 1
    assert float(mx.abs(layer.mlp.gate.e_score_correction_bias).sum()) > 0


def test_tokenizer_loads_with_transformers(tmp_path):
    out = make_random("mixtral", tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = tok.encode("return self.value")
    assert tok.decode(ids) == "return self.value"


def test_same_seed_same_weights(tmp_path):
    a = make_random("mixtral", tmp_path / "a", seed=7)
    b = make_random("mixtral", tmp_path / "b", seed=7)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_unknown_family_lists_supported(tmp_path):
    with pytest.raises(SpecdecError, match="supported: .*deepseek_v3"):
        make_random("llama", tmp_path / "x")


@pytest.mark.slow
def test_cli_make_random(tmp_path):
    from tests.store.test_store_errors import assert_user_error, specdec

    proc = specdec("make-random", "qwen3_moe", tmp_path / "q", "--quantize", "3", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    assert "3-bit" in proc.stdout
    assert json.loads((tmp_path / "q" / "config.json").read_text())["quantization"]["bits"] == 3
    assert_user_error(specdec("make-random", "llama", tmp_path / "x"), "supported:", "mixtral")
    assert_user_error(specdec("make-random", "mixtral", tmp_path / "x", "--quantize", "7"), "bits")


def test_make_random_on_a_full_disk_leaves_nothing(tmp_path):
    """A real full disk: a 400 KiB tmpfs mounted in a user and mount namespace (`unshare -rm`,
    skipped where not allowed). make-random refuses before writing when the checkpoint cannot
    fit, and when the disk fills anyway (the check bypassed, as if another writer took the
    space) its temporary directory goes; both are one line, status 2."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # unshare needs 1 thread
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-rm", "true"], env=env, capture_output=True).returncode
    ):
        pytest.skip("needs unshare -rm (user and mount namespaces) to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    code = (
        "import os, sys\n"
        "from specdec.cli import main\n"
        "import specdec.checkpoint.random_models as rm\n"
        "argv = ['make-random', 'qwen3_moe', sys.argv[1] + '/rnd', '--quantize', '4']\n"
        "first = main(argv)\n"
        "rm.check_free_space = lambda *a: None\n"
        "print('rc', first, main(argv), sorted(os.listdir(sys.argv[1])))\n"
    )
    mount = f'mount -t tmpfs -o size=400k none {disk} && exec {sys.executable} -c "$0" {disk}'
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, code],
        cwd=root,
        env={**env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.split() == ["rc", "2", "2", "[]"], proc.stdout + proc.stderr
    errors = proc.stderr.strip().splitlines()[-2:]
    assert errors[0].startswith(f"specdec: error: the checkpoint {disk}/rnd needs ")
    assert errors[0].endswith("KiB free; free space or write elsewhere")
    assert errors[1].startswith(f"specdec: error: {disk}/rnd: cannot write ([write] Unable")
