"""Extension points found by name (drafters, cache policies, probes), as mlx-lm finds a family.

    DRAFTERS = Registry("drafter")
    @DRAFTERS.register
    class OracleDrafter(Drafter): name = "oracle"; ...
    import_package(__name__, __path__, skip=("registry",))   # in the package's __init__.py

Every module of the package registers what it defines when it is imported, so adding a file
adds the extension. A file outside the package registers the same way when it is named in
SPECDEC_PLUGINS (paths of .py files, separated by the OS's path separator `:`): the entry points
(`specdec`, `specdec-exp`) import them before anything else; library code calls load_plugins().

    SPECDEC_PLUGINS=~/my_fifo.py specdec generate --policy fifo
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterable
from pathlib import Path

from specdec.core.errors import SpecdecError

PLUGINS_ENV = "SPECDEC_PLUGINS"


class Registry(dict):
    """name -> class; each class says its own `name`."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, cls: type) -> type:
        """Class decorator: make `cls` findable by its `name`."""
        if cls.name in self and self[cls.name] is not cls:
            raise ValueError(f"two {self.what}s named {cls.name!r}")
        self[cls.name] = cls
        return cls


def import_package(name: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
    """Import every module of package `name` (its `__path__`) but `skip`."""
    for m in pkgutil.iter_modules(path):
        if m.name not in skip:
            importlib.import_module(f"{name}.{m.name}")


def load_plugins() -> None:
    """Import each file SPECDEC_PLUGINS names, once per process (a module per resolved path)."""
    for entry in filter(None, os.environ.get(PLUGINS_ENV, "").split(os.pathsep)):
        path = Path(entry).expanduser().resolve()
        name = "specdec_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            continue
        if not path.is_file():
            raise SpecdecError(f"{PLUGINS_ENV}: {entry} is not a file; give paths of .py files")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
