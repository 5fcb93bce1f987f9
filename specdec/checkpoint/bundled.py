"""Models shipped inside the package (`specdec models` lists them: specdec.cli.model).

`resolve_model("tiny")` gives the bundled directory, whatever the working directory holds: a
bundled name is a path only when written as one (`./tiny`, `/abs/tiny`, `~/tiny`, `dir/tiny`);
any other argument must be an existing directory. Every command's `--model` goes through it
(stream/loader.py `resolve`), so `--model tiny` works everywhere and is the default. The bundled `tiny` model is trained by training/train_tiny.py and
described in specdec/models/tiny/README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from specdec.core.errors import SpecdecError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
BUNDLED: dict[str, Path] = {"tiny": MODELS_DIR / "tiny"}
DEFAULT_MODEL = "tiny"  # what every command and the main job run on unless told otherwise
DEFAULT_PROMPT = "def fibonacci(n):"  # the bundled model writes Python


def written_as_path(arg: str | Path) -> bool:
    """`./tiny`, `/abs/tiny`, `~/tiny`, `dir/tiny`: a path, even where a bundled model has
    that name; a bare `tiny` is the bundled model."""
    s = str(arg)
    seps = [os.sep, *([os.altsep] if os.altsep else [])]
    return any(sep in s for sep in seps) or s.startswith(("~", ".")) or Path(s).is_absolute()


def resolve_model(name_or_path: str | Path) -> Path:
    """A bundled model's directory for its bare name, else `name_or_path` as a directory."""
    if str(name_or_path) in BUNDLED and not written_as_path(name_or_path):
        return BUNDLED[str(name_or_path)]
    if not str(name_or_path).strip():
        raise SpecdecError(
            f"model {str(name_or_path)!r} is empty: give an mlx-lm model directory, a packed "
            f"directory or a bundled model name ({', '.join(sorted(BUNDLED))})"
        )
    try:
        path = Path(name_or_path).expanduser()
    except RuntimeError:  # `~user/...` of a user without a home directory
        path = Path(name_or_path)
    if path.is_dir():
        return path
    if written_as_path(name_or_path) or path.exists():
        raise SpecdecError(
            f"model path {name_or_path} does not exist (or is not a directory): give an mlx-lm "
            f"model directory, a packed directory, a Hugging Face repo id (ORG/NAME) or a bundled "
            f"model name ({', '.join(sorted(BUNDLED))})"
        )
    raise SpecdecError(
        f"model {str(name_or_path)!r} does not exist: no such directory and no bundled model of that "
        f"name; pass an mlx-lm model directory or one of the bundled models: {', '.join(sorted(BUNDLED))}"
    )
