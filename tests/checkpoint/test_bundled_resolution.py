"""A bundled model's bare name is the bundled model, whatever the working directory holds.

Run: `pytest tests/checkpoint/test_bundled_resolution.py`. Issue 22 found a `./tiny` folder in
the working directory replacing the bundled model for `--model tiny` (and results still
labelled "tiny"); a path is a path only when written as one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.checkpoint.bundled import BUNDLED, resolve_model, written_as_path
from specdec.cli import main
from specdec.core.errors import SpecdecError

TINY = BUNDLED["tiny"]


@pytest.mark.parametrize(
    "arg, as_path",
    [("tiny", False), ("./tiny", True), ("../tiny", True), ("~/tiny", True), ("a/tiny", True)],
)
def test_written_as_path(arg, as_path):
    assert written_as_path(arg) is as_path


def test_a_tiny_folder_in_the_working_directory_is_not_the_bundled_model(tmp_path, monkeypatch):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.chdir(tmp_path)
    assert resolve_model("tiny") == TINY
    assert resolve_model("./tiny") == Path("./tiny")
    assert resolve_model(str(tmp_path / "tiny")) == tmp_path / "tiny"


def test_a_path_without_config_says_how_to_name_the_bundled_model(tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", "./tiny", "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"specdec: error: {tmp_path / 'tiny'}: no config.json; give an mlx-lm model directory "
        "or a packed one (the bundled model is `--model tiny`)"
    )


def test_an_unknown_bare_name_lists_the_bundled_models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecdecError, match="'nope' does not exist.*bundled models: tiny"):
        resolve_model("nope")


@pytest.mark.parametrize("arg, words", [("", "is empty"), ("~nouser-r22b/x", "does not exist")])
def test_an_empty_name_or_an_unknown_home_is_one_line(arg, words):
    with pytest.raises(SpecdecError, match=words):
        resolve_model(arg)
