"""Two processes on one packed directory: both correct, and first-use packing is not raced.

Run: `pytest tests/e2e/test_concurrency.py`.

- Two `specdec generate` processes start at once on the same *unpacked* model directory with
  the same SPECDEC_CACHE: both pack it on first use into the same cache directory (one packs,
  the other waits on the pack lock and then finds the pack), then both stream their experts
  from that one experts.bin with O_DIRECT, with different budgets, policies and γ. Both must
  give exactly mlx-lm's greedy tokens, and the cache must hold one complete pack.
- A second `specdec pack` into an OUT_DIR that another pack is writing says it waits, and
  finishes after the first one is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from mlx_lm import load as mlx_load

from specdec.checkpoint.random_models import make_random
from specdec.pack.verify import verify
from specdec.store.layout import ExpertIndex
from tests.helpers import mlx_lm_greedy

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def main():\n    return"
N_TOKENS = 24


def spawn(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specdec", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_stream_one_packed_dir(tmp_path):
    model = make_random("deepseek_v3", tmp_path / "model", bits=4, seed=3)
    ref_model, tok = mlx_load(str(model))
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    ref = mlx_lm_greedy(ref_model, prompt, N_TOKENS)
    common = ["generate", "--model", str(model), "--prompt", PROMPT, "--json", "--io", "direct"]
    runs = [
        ["--budget", "25%", "--policy", "lru", "--max-tokens", str(N_TOKENS)],
        ["--budget", "6slots", "--policy", "slru", "--drafter", "self", "--gamma", "3"],
    ]
    runs[1] += ["--max-tokens", str(N_TOKENS)]
    procs = [spawn(common + r, SPECDEC_CACHE=str(tmp_path / "cache")) for r in runs]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs, strict=True):
        assert p.returncode == 0, stderr
        tokens = json.loads(stdout.strip().splitlines()[-1])["tokens"]
        assert tokens == ref, "a process streaming beside another one diverged"
    packed = [d for d in (tmp_path / "cache" / "packed").iterdir() if d.is_dir()]
    assert len(packed) == 1, packed
    verify(packed[0], io="buffered")


def test_second_pack_of_one_out_dir_waits_for_the_first(tmp_path):
    model = make_random("qwen3_moe", tmp_path / "model", bits=4, seed=0)
    out = tmp_path / "out"
    first = spawn(["pack", str(model), str(out)], SPECDEC_TEST_PACK_STALL="experts")
    second = None
    try:
        assert "pack stalled at experts" in first.stderr.readline()
        second = spawn(["pack", str(model), str(out)])
        assert "waiting for another pack" in second.stderr.readline()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        stdout, stderr = second.communicate(timeout=120)
        assert second.returncode == 0, stderr
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert ExpertIndex.load(out).n_blocks == 48
    verify(out, io="buffered")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["model", "out"]
