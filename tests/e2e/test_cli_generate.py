"""`specdec generate` end to end through the real CLI: JSON output and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import random_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return random_checkpoint(tmp_path_factory.mktemp("gen"), "deepseek_v3", 4)


def specdec(*args, env_cache, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "specdec", *map(str, args)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "SPECDEC_CACHE": str(env_cache)},
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_generate_json_stats(ckpt, tmp_path):
    out = specdec(
        "generate",
        "--model",
        ckpt,
        "--prompt",
        "def f(x):",
        "--max-tokens",
        12,
        "--budget",
        "30%",
        "--json",
        "--drafter",
        "self",
        "--gamma",
        3,
        "--records",
        tmp_path / "r.jsonl",
        "--profile",
        "m4-24gb",
        env_cache=tmp_path,
    )
    d = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(d["tokens"]) == 12 and isinstance(d["text"], str)
    s = d["stats"]
    for key in (
        "bytes_read",
        "hits",
        "misses",
        "hit_rate",
        "blocked_s",
        "tokens_per_s",
        "acceptance",
        "accepted_per_drafted",
        "mean_union",
        "draft_bytes_read",
        "verify_bytes_read",
    ):
        assert key in s, key
    assert s["bytes_read"] == s["draft_bytes_read"] + s["verify_bytes_read"] > 0
    assert s["misses"] > 0 and 0 < s["hit_rate"] < 1
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == s["passes"] and json.loads(lines[0])["gamma"] == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget", "2slots"], "one position selects top-k = 4: use at least"),
        (["--budget", "12parsecs"], "unknown unit"),
        (["--policy", "fifo"], "unknown cache policy 'fifo'"),
        (["--gamma", "0"], "gamma must be >= 1"),
        (["--drafter", "mtp", "--gamma", "2", "--model", "MISSING"], "does not exist"),
        (["--drafter", "telepathy", "--gamma", "2"], "unknown drafter"),
        (["--lookahead", "-1"], "lookahead must be >= 0"),
    ],
)
def test_bad_input_is_one_clear_line(ckpt, tmp_path, args, message):
    model = ["--model", ckpt] if "--model" not in args else []
    missing = [a if a != "MISSING" else tmp_path / "no" / "such" for a in args]
    proc = specdec("generate", *model, *missing, "--max-tokens", 4, env_cache=tmp_path, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr, proc.stderr


def test_an_error_as_the_run_starts_leaves_no_records_and_no_echoed_prompt(ckpt, tmp_path):
    """A draft model that is not there is found once the target is loaded: the error was glued
    to the prompt already echoed on stdout, and the records file stayed behind empty, refusing
    the same command run again ("exists")."""
    records = tmp_path / "r.jsonl"
    args = ["generate", "--model", ckpt, "--prompt", "def f(x):", "--max-tokens", 4]
    args += ["--records", records]
    proc = specdec(*args, "--drafter", f"draft:{tmp_path / 'no-model'}", "--gamma", 2,
                   env_cache=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == "" and not records.exists()
    again = specdec(*args, env_cache=tmp_path)
    assert again.stdout.startswith("def f(x):") and records.exists()


def test_a_model_type_mlx_lm_does_not_know_gives_one_line(ckpt, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["model_type"] = "not_a_model"
    (other / "config.json").write_text(json.dumps(cfg))
    proc = specdec("generate", "--model", other, env_cache=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the installed mlx-lm has no model_type 'not_a_model'" in proc.stderr


def test_a_hotlist_seeds_static_and_hotness(ckpt, tmp_path, monkeypatch):
    """--hotlist FILE pins for static (none: a one-line error); hotness takes it as its seed."""
    cfg = json.loads((ckpt / "config.json").read_text())
    layers = range(cfg.get("first_k_dense_replace", 0), cfg["num_hidden_layers"])
    pairs = [(ly, e) for ly in layers for e in range(cfg["n_routed_experts"])]
    hot = tmp_path / "hot.txt"
    hot.write_text("# ds4 expert hotlist v1\n" + "".join(f"{ly} {e} 1 1\n" for ly, e in pairs))
    base = ["generate", "--model", ckpt, "--max-tokens", 6, "--budget", "100%", "--json"]
    for policy in ("static", "hotness"):
        out = specdec(*base, "--policy", policy, "--hotlist", hot, env_cache=tmp_path)
        assert json.loads(out.stdout.splitlines()[-1])["stats"]["passes"] > 0, policy
    bare = specdec(*base, "--policy", "static", env_cache=tmp_path, check=False)
    assert bare.returncode == 2 and "pins a hotlist: pass --hotlist FILE" in bare.stderr
    hot.write_text("# ds4 expert hotlist v1\n0 999 1 1\n")
    bad = specdec(*base, "--policy", "static", "--hotlist", hot, env_cache=tmp_path, check=False)
    assert bad.returncode == 2 and "is not a routed expert of this model" in bad.stderr
    # what the hotlist buys: static pins it (a scratch of one position's top-k leaves room)
    from specdec.decode.run import generate
    from specdec.stream.loader import load

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    k = cfg["num_experts_per_tok"]
    for options, hits in (({"hotlist": pairs, "scratch": k}, True), ({"scratch": k}, False)):
        sm = load(ckpt, budget="100%", policy="static", policy_options=options, with_mtp=False)
        try:
            res = generate(sm, sm.encode("def f(x):"), "none", stop_at_eos=False)
        finally:
            sm.close()
        assert (res.summary["hit_rate"] > 0) == hits, options
