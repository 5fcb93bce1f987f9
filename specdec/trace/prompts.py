"""Prompt sets for trace recording: the shipped code prompts, prompt files, `datasets` datasets.

    load_prompts("heldout")                 # specdec/data/prompts_heldout.jsonl (the default)
    load_prompts("profile")                 # a disjoint set, for profiling hotlists
    load_prompts("my_prompts.jsonl")        # {"text": ...} per line; a .txt file: one per line
    load_prompts("dataset:openai_humaneval", split="test", limit=40)

The shipped sets are short code excerpts from CPython's standard library, picked by a fixed rule
so anyone can rebuild them: the top-level `Lib/*.py` files, sorted by name, skipping names that
start with `_`; even positions go to `heldout`, odd ones to `profile`, 40 each; a prompt is the
file from its first top-level `def ` or `class ` line, cut to whole lines under 600 characters.
Rebuild with `python -m specdec.trace.prompts` (output differs only across Python versions).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import sysconfig
from pathlib import Path
from urllib.parse import urlparse

from specdec.core.errors import SpecdecError
from specdec.core.files import durable_replace
from specdec.core.inputs import check_input_file

DATA = Path(__file__).resolve().parent.parent / "data"
SHIPPED = {"heldout": DATA / "prompts_heldout.jsonl", "profile": DATA / "prompts_profile.jsonl"}
N_PER_SET = 40
MAX_CHARS = 600


def load_prompts(
    spec: str, split: str = "train", limit: int | None = None, field: str | None = None
) -> list[str]:
    """Prompt texts from a shipped set name, a file, or `dataset:NAME` (see module doc)."""
    if limit is not None and limit < 1:  # 0 would mean "all", -1 "all but the last"
        raise SpecdecError(f"--limit {limit}: give at least 1 prompt (leave --limit out for all)")
    if spec.startswith("dataset:"):
        texts = _from_dataset(spec[len("dataset:") :], split, field, limit)
    else:
        path = SHIPPED.get(spec, Path(spec))
        texts = _from_file(path, field)
    texts = texts[:limit] if limit else texts
    if not texts:
        raise SpecdecError(f"{spec}: no prompts found: give a file with at least one prompt")
    return texts


def _from_file(path: Path, field: str | None) -> list[str]:
    try:
        check_input_file(path, "prompts file", limit=None)
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or type(err).__name__
        raise SpecdecError(
            f"{path}: cannot read prompts ({why}): give a .jsonl or .txt file, "
            "a shipped set (heldout, profile) or dataset:NAME"
        ) from None
    if path.suffix != ".jsonl":
        return [line for line in lines if line.strip()]
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row[field] if field else row.get("text", row.get("prompt"))
            if not isinstance(text, str):  # a number or null would be recorded as "5", "None"
                raise TypeError(text)
            out.append(text)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            want = field or "text"
            raise SpecdecError(
                f"{path}:{n}: expected a JSON object with a text {want!r} field: fix the line"
            ) from None
    return out


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host answers a TCP connect (so an offline run fails fast, not after
    minutes of the hub client's retries)."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_dataset(name: str, split: str, field: str | None, limit: int | None) -> list[str]:
    """A `datasets` dataset: a directory saved with save_to_disk, or a hub/local name."""
    if not Path(name).exists() and "datasets" not in sys.modules and not _hub_reachable():
        # offline: let `datasets` use its local cache only (read when it is first imported)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise SpecdecError(
            "dataset:NAME needs the `datasets` package: pip install datasets"
        ) from None
    try:
        if (Path(name) / "dataset_info.json").is_file() or (Path(name) / "state.json").is_file():
            ds = datasets.load_from_disk(name)
            ds = ds[split] if isinstance(ds, datasets.DatasetDict) else ds
        else:
            ds = datasets.load_dataset(name, split=split)
    except Exception as err:  # the hub client raises many types (offline, 404, auth)
        msg = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise SpecdecError(
            f"dataset {name!r} (split {split!r}) could not be loaded ({msg}): check the name, "
            "connect to the network or pass a local directory saved with save_to_disk"
        ) from None
    columns = [c for c, f in ds.features.items() if getattr(f, "dtype", None) == "string"]
    col = field or next(iter(columns), None)
    if col is None or col not in ds.column_names:
        raise SpecdecError(
            f"dataset {name!r} has no text column {col!r}: pass --text-field, one of {ds.column_names}"
        )
    rows = ds.select(range(min(limit, len(ds)))) if limit else ds
    return [str(t) for t in rows[col]]


def _excerpt(source: str) -> str | None:
    lines = source.splitlines(keepends=True)
    start = next((i for i, s in enumerate(lines) if s.startswith(("def ", "class "))), None)
    if start is None:
        return None
    out = ""
    for line in lines[start:]:
        if len(out) + len(line) > MAX_CHARS:
            break
        out += line
    return out.rstrip() + "\n" if out.strip() else None


def build_prompt_files(stdlib: Path | None = None) -> None:
    """Write the two shipped prompt sets by the module doc's rule (atomically)."""
    lib = stdlib or Path(sysconfig.get_paths()["stdlib"])
    picked: list[tuple[str, str]] = []
    for f in sorted(lib.glob("*.py")):
        if f.name.startswith("_"):
            continue
        text = _excerpt(f.read_text(errors="replace"))
        if text:
            picked.append((f.name, text))
        if len(picked) == 2 * N_PER_SET:
            break
    for parity, (name, path) in enumerate(SHIPPED.items()):
        rows = [
            {"id": f"{name}-{i:02d}", "source": f"Lib/{src}", "text": text}
            for i, (src, text) in enumerate(picked[parity::2])
        ]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        durable_replace(tmp, path)
        print(f"{path}: {len(rows)} prompts (Python {sys.version.split()[0]})")


if __name__ == "__main__":
    build_prompt_files()
