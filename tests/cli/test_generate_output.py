"""`specdec generate`'s output: text streamed to stdout pass by pass, the summary on stderr.

pytest tests/cli/test_generate_output.py -q
"""

from __future__ import annotations

import io
import json
import sys

from specdec.checkpoint.bundled import DEFAULT_PROMPT
from specdec.cli import main
from specdec.cli.generate_summary import summary_lines
from specdec.core.progress import QUIET_ENV
from tests.core.test_progress import Terminal


class Writes(io.StringIO):
    """stdout that keeps each write, to see the text arrive in pieces."""

    def __init__(self):
        super().__init__()
        self.pieces: list[str] = []

    def write(self, s: str) -> int:
        self.pieces.append(s)
        return super().write(s)


def test_text_streams_and_the_summary_names_drafter_gamma_and_speeds(monkeypatch, capsys):
    args = ["generate", "--max-tokens", "12", "--drafter", "oracle:0.9", "--gamma", "3"]
    monkeypatch.delenv(QUIET_ENV, raising=False)
    with monkeypatch.context() as m:  # at a terminal, --json draws bars instead of text
        m.setattr(sys, "stderr", Terminal())
        assert main([*args, "--json"]) == 0
        bars = sys.stderr.getvalue()
    assert "reference (plain)" in bars and "generate" in bars  # the oracle's plain run first
    want = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    out = Writes()
    monkeypatch.setattr(sys, "stdout", out)
    assert main([*args, "--profile", "m4-24gb", "--profile", "m5-24gb"]) == 0
    err = capsys.readouterr().err
    assert out.getvalue() == DEFAULT_PROMPT + want["text"] + "\n"  # the same text, streamed
    # the prompt, then one write per verify pass (and the detokenizer's last piece)
    assert len(out.pieces) >= 1 + want["stats"]["passes"]
    assert "drafter oracle:0.9, γ 3 (2 drafts per verify pass)" in err
    assert f"in {want['stats']['passes']} verify passes" in err
    assert "acceptance α" in err and "per token" in err and "cache hit rate" in err
    assert (
        f"cache {want['stats']['cache_slots']} slots" in err
    )  # a share's count differs by command
    assert "m4-24gb" in err and "m5-24gb" in err and "tok/s" in err


def test_auto_that_stays_plain_says_why(capsys):
    argv = ["generate", "--max-tokens", "40", "--drafter", "oracle:0.9", "--gamma", "auto"]
    assert main([*argv, "--budget", "10%", "--json"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["stats"]
    # a block's later passes count under the reason its first pass was chosen
    assert sum(s["gamma_why"].values()) == s["passes"] and "hold" not in s["gamma_why"]
    assert s["gamma_chosen_hist"][2:] == [] or sum(s["gamma_chosen_hist"][2:]) == 0
    text = "\n".join(summary_lines(s))
    assert "γ auto, passes per γ: γ=1: " in text
    top = next(iter(s["gamma_why"]))
    assert f"stayed plain: mostly {top!r}" in text
    drafted = dict(s, gamma_chosen_hist=[0, 3, 5], gamma_why={"best": 8})
    assert "stayed plain" not in "\n".join(summary_lines(drafted))
