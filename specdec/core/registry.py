"""Extension points found by name (drafters, cache policies), as mlx-lm finds a model family.

    DRAFTERS = Registry("drafter")
    @DRAFTERS.register
    class OracleDrafter(Drafter): name = "oracle"; ...
    import_package(__name__, __path__, skip=("registry",))   # in the package's __init__.py

Every module of the package registers what it defines when it is imported, so adding a file
adds the extension.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


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
