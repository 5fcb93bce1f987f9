"""Small input files a user names (a config.json, a hotlist), read only when they can be read.

    config = read_json_object(Path("model/config.json"), "--config")

A device (/dev/zero), a FIFO or a folder named where a file belongs would block a read forever
or fail deep inside a parser; a file far larger than any such input is not one. Both are
refused here, with one line naming the path.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from specdec.core.errors import SpecdecError

# 64 MiB: far above any config.json or hotlist (a line per expert of a 128-layer model of
# 2^14 experts is ~60 MB at 30 bytes a line)
MAX_INPUT_BYTES = 64 << 20


def check_input_file(path: Path, what: str, limit: int | None = MAX_INPUT_BYTES) -> None:
    """Raise unless `path` is a regular file of at most `limit` bytes (None: any size; OSError
    passes through)."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise SpecdecError(f"{path}: not a regular file (a device, FIFO or folder): give a {what}")
    if limit is not None and st.st_size > limit:
        raise SpecdecError(
            f"{path}: {st.st_size} bytes, more than any {what} ({limit >> 20} MiB): give a {what}"
        )


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in `path`, or one line saying why it is not one."""
    try:
        check_input_file(path, what)
        data = json.loads(path.read_text())
    except OSError as e:
        raise SpecdecError(
            f"{path}: cannot read the {what} ({e.strerror}): check the path"
        ) from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise SpecdecError(f"{path}: the {what} is not JSON ({e}): give a JSON object") from None
    if not isinstance(data, dict):
        raise SpecdecError(
            f"{path}: the {what} is a JSON {type(data).__name__}, not an object: give a JSON object"
        )
    return data
