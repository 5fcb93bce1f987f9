"""`specdec SUBCOMMAND --help`: every option explained with its default, and fast.

pytest tests/cli/test_help.py -q
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from specdec.cli import COMMANDS, HelpFormatter, _subparsers, command

# what `--help` must not import: each costs a second or more (mlx-lm: transformers, 3-4 s)
HEAVY = ("mlx_lm", "transformers", "scipy", "matplotlib", "wandb", "hydra", "numba", "datasets")


def parsers():
    for name, (target, _) in COMMANDS.items():
        p = argparse.ArgumentParser(prog=f"specdec {name}", formatter_class=HelpFormatter)
        command(target)[0](p)
        for sub in [p, *_subparsers(p)]:
            sub.formatter_class = HelpFormatter
            yield sub


def test_every_option_has_help_and_shows_its_default():
    for p in parsers():
        text = "".join(p.format_help().split())  # argparse wraps long values mid-word
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction) or a.dest == "help":
                continue
            assert a.help, f"{p.prog} {a.option_strings or a.dest}: no help text"
            d = a.default
            if d is None or d is False or d == [] or d == argparse.SUPPRESS or not a.option_strings:
                continue
            shown = "".join(str(d).split())
            assert f"(default:{shown})" in text, f"{p.prog} {a.option_strings}: default not shown"


def test_help_imports_nothing_heavy():
    code = (
        "import sys\nfrom specdec.cli import COMMANDS, main\n"
        "for name in COMMANDS:\n"
        "    try:\n        main([name, '--help'])\n    except SystemExit:\n        pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


def test_make_random_and_extract_mtp_say_what_they_do():
    assert "tiny" not in COMMANDS["make-random"][1]
    assert "real model's dimensions" in COMMANDS["make-random"][1]
    p = argparse.ArgumentParser()
    command(COMMANDS["extract-mtp"][0])[0](p)
    text = " ".join(p.format_help().split())
    for model_type in ("deepseek_v3", "glm4_moe", "qwen3_next", "kimi_k2"):
        assert model_type in text
