"""`--model ORG/NAME` through mlx-lm's own hub loading, offline, against a hub cache laid out as
huggingface_hub lays it out: models--ORG--NAME/{blobs/SHA, snapshots/REV/FILE -> blob, refs/main}.

    pytest tests/e2e/test_hub_model.py -q

The cache holds the bundled tiny model at two revisions: main (as shipped, no chat template) and
another whose tokenizer_config.json adds one, so one run checks that the revision is honoured,
that the chat template is applied by default as mlx-lm applies it, and that
--ignore-chat-template turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from specdec.checkpoint.bundled import BUNDLED

MAIN, OTHER = "a" * 40, "b" * 40  # commit hashes, as the hub names snapshots
TEMPLATE = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"


def hub_cache(root: Path) -> Path:
    repo = root / "models--org--tiny-moe"
    for rev in (MAIN, OTHER):
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        for f in sorted(BUNDLED["tiny"].iterdir()):
            data = f.read_bytes()
            if rev == OTHER and f.name == "tokenizer_config.json":
                data = json.dumps({**json.loads(data), "chat_template": TEMPLATE}).encode()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(exist_ok=True)
            blob.write_bytes(data)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    return root


SNIPPET = """
import contextlib, io, json, sys
from specdec.cli import main
from specdec.stream.loader import resolve

def run(*extra):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["generate", "--model", "org/tiny-moe", "-m", "6", "--json", *extra]) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])["tokens"]

other = sys.argv[1]
print(json.dumps({
    "main_dir": str(resolve("org/tiny-moe")),
    "other_dir": str(resolve("org/tiny-moe", other)),
    "main": run(),
    "bundled": run("--model", "tiny"),
    "other": run("--revision", other),
    "other_raw": run("--revision", other, "--ignore-chat-template"),
}))
"""


def test_repo_id_resolves_offline_from_the_hub_cache(tmp_path):
    cache = hub_cache(tmp_path / "hub")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "SPECDEC_CACHE": str(tmp_path / "specdec"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SNIPPET, OTHER], env=env, capture_output=True, text=True,
        timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    snapshots = cache / "models--org--tiny-moe" / "snapshots"
    assert Path(r["main_dir"]) == snapshots / MAIN  # refs/main
    assert Path(r["other_dir"]) == snapshots / OTHER  # --revision
    assert r["main"] == r["bundled"]  # the same model, from the hub cache
    assert r["other"] != r["other_raw"]  # the chat template applied by default ...
    assert r["other_raw"] == r["main"]  # ... and --ignore-chat-template turns it off
