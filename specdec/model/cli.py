"""`specdec models`: the bundled models, name and path.

python -m specdec models           # name and path, one a line
python -m specdec models --json    # {"tiny": "/.../specdec/models/tiny"}
"""

from __future__ import annotations

import argparse
import json

from specdec.model.bundled import BUNDLED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print {name: path} as JSON")


def run(args: argparse.Namespace) -> int:
    models = {name: str(path) for name, path in BUNDLED.items()}
    if args.json:
        print(json.dumps(models))
    else:
        for name, path in models.items():
            print(f"{name}\t{path}")
    return 0
