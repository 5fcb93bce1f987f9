"""Models shipped inside the package (`specdec models` lists them: specdec.cli.model).

`resolve_model("tiny")` gives the bundled directory; any other argument must be an existing
model directory. Every command's `--model` goes through it, so `--model tiny` works everywhere
and is the default. The bundled `tiny` model is trained by training/train_tiny.py and
described in specdec/models/tiny/README.md.
"""

from __future__ import annotations

from pathlib import Path

from specdec.core.errors import SpecdecError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
BUNDLED: dict[str, Path] = {"tiny": MODELS_DIR / "tiny"}
DEFAULT_MODEL = "tiny"  # what every command and the main job run on unless told otherwise
DEFAULT_PROMPT = "def fibonacci(n):"  # the bundled model writes Python


def resolve_model(name_or_path: str | Path) -> Path:
    """A bundled model's directory, or `name_or_path` itself if it is a model directory."""
    if str(name_or_path) in BUNDLED:
        return BUNDLED[str(name_or_path)]
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").exists():
        return path
    what = "has no config.json" if path.is_dir() else "does not exist"
    raise SpecdecError(
        f"model {str(name_or_path)!r}: {path} {what}; pass an mlx-lm model directory "
        f"or one of the bundled models: {', '.join(sorted(BUNDLED))}"
    )
