"""The `specdec` command: one subcommand per job, each in the module that owns the job.

Run `specdec --help` for the list, `specdec SUBCOMMAND --help` for its options. Command-line
code lives in each part's cli.py: a target `specdec.PART.cli` exposes `add_arguments(parser)` and
`run(args) -> int`; `specdec.PART.cli:NAME`, one of several commands of that part, exposes
`add_NAME_arguments(parser)` and `run_NAME(args) -> int`. Only the chosen one is imported, so
`specdec simulate` never pays for loading MLX models.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from specdec.core.blas import ensure_fast_blas
from specdec.core.errors import SpecdecError
from specdec.core.progress import QUIET_ENV
from specdec.core.registry import load_plugins

COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("specdec.cli.generate", "generate text with routed experts streamed from disk"),
    "pack": ("specdec.cli.store:pack", "pack an mlx-lm model directory for streaming"),
    "verify": ("specdec.cli.store:verify", "check every expert block of a packed directory"),
    "make-random": (
        "specdec.cli.model:make_random",
        "write a random-weight checkpoint: a small FAMILY one (a few MB), or --like PRESET at "
        "a real model's dimensions (hundreds of MB to GB; --layers/--experts shrink it)",
    ),
    "models": ("specdec.cli.model:models", "list the bundled models"),
    "extract-mtp": (
        "specdec.cli.model:extract_mtp",
        "take the MTP layer out of a Hugging Face checkpoint (DeepSeek-V3/V3.2, Kimi-K2, "
        "GLM-4.5/4.6, Qwen3-Next) and add it to its mlx-lm model directory",
    ),
    "bench": (
        "specdec.cli.bench",
        "benchmarks: read paths (`bench read`), host overhead (`bench overhead`), speed-up in lockstep (`bench speedup`)",
    ),
    "trace": (
        "specdec.cli.trace",
        "routing traces: record, synth, stats, fit; ds4 hotlists",
    ),
    "simulate": (
        "specdec.cli.simulate",
        "replay a routing trace through cache policies and bounds",
    ),
    "union-model": (
        "specdec.cli.union_model",
        "fit union cost and speedup bounds from a union table",
    ),
    "probe": (
        "specdec.cli.probe",
        "the question's measurements: eviction, lookahead, gates, basis, read_path",
    ),
    "report": ("specdec.cli.report", "tables and plots from a run or sweep directory"),
    "clock": ("specdec.cli.clock", "device profiles: `clock show NAME`, `clock check`"),
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (none shown for flags and unset options)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == []
        if "%(default)" in text or unset or action.default == argparse.SUPPRESS:
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text  # a required positional has no default
        return f"{text} (default: %(default)s)"


def command(target: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable]:
    """(add_arguments, run) of a target `module` or `module:NAME` (see the top of this file)."""
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    if not name:
        return module.add_arguments, module.run
    return getattr(module, f"add_{name}_arguments"), getattr(module, f"run_{name}")


QUIET_HELP = f"no progress bars on stderr (also {QUIET_ENV}=1; off anyway without a terminal)"


# the modules of pyproject.toml's extras: `pip install specdec` alone decodes
EXTRA_OF = {
    **dict.fromkeys(("scipy", "numba", "libcachesim"), "sim"),
    **dict.fromkeys(("hydra", "omegaconf", "wandb", "matplotlib", "submitit"), "sweeps"),
    "datasets": "data",
}


def missing_extra(name: str, e: ModuleNotFoundError) -> int:
    """One line for a module of an extra not installed; anything else is a bug (re-raised)."""
    top = (e.name or "").split(".")[0]
    if top not in EXTRA_OF:
        raise e
    extra = EXTRA_OF[top]
    print(
        f"specdec: error: specdec {name} needs {top}, of the {extra!r} extra: "
        f"pip install 'specdec[{extra}]' (or 'specdec[all]')",
        file=sys.stderr,
    )
    return 2


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += [sub, *_subparsers(sub)]
    return out


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: specdec SUBCOMMAND [options]\n\nsubcommands:\n{rows}\n"


class _StdoutError(Exception):
    """Standard output failed: a closed pipe (`| head`) or a full device (`> /dev/full`)."""

    def __init__(self, error: OSError):
        self.error = error


class _Stdout:
    """sys.stdout while a command runs: a failed write or flush becomes `_StdoutError`, which
    `main` reports in one line (or, for a closed pipe, not at all), instead of a traceback."""

    def __init__(self, real):
        self._real = real

    def write(self, text: str) -> int:
        try:
            return self._real.write(text)
        except OSError as e:
            raise _StdoutError(e) from None

    def flush(self) -> None:
        try:
            self._real.flush()
        except OSError as e:
            raise _StdoutError(e) from None

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def output_path(text: str) -> Path:
    """argparse's type for an output file or folder: an empty name is refused where it is given
    (Path("") is ".", the working directory, which a command would then write into or over)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the output path is empty; give a file or folder name")
    return Path(text)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors one line as every user error is (docs/errors.md):
    the problem and where the options are listed, not the usage block. Subcommands' parsers
    (`bench read`, ...) are made of the same class."""

    def error(self, message: str):
        hint = ""
        if message.startswith("argument ") and message.endswith("expected one argument"):
            flag = message[len("argument ") :].split(":")[0].split("/")[-1]
            hint = f": give it a value (one that starts with '-' as {flag}=VALUE)"
        print(f"specdec: error: {self.prog}: {message}{hint} (`{self.prog} --help`)",
              file=sys.stderr)  # fmt: skip
        self.exit(2)


def main(argv: list[str] | None = None) -> int:
    real = sys.stdout
    sys.stdout = _Stdout(real)
    try:
        try:
            rc = _main(argv)
            sys.stdout.flush()  # a write error shows here, not as a traceback at exit
            return rc
        finally:
            sys.stdout = real
    except _StdoutError as e:
        # the interpreter flushes stdout again at exit: let that land nowhere
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), real.fileno())
        if isinstance(e.error, BrokenPipeError):
            return 128 + signal.SIGPIPE  # quietly, as `head` expects of the tools before it
        print(
            f"specdec: error: cannot write to standard output ({e.error.strerror or e.error}); "
            "send it to a file or device with space",
            file=sys.stderr,
        )
        return 2


_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.EROFS,
                errno.EACCES, errno.EPERM}  # fmt: skip


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        ensure_fast_blas()
        load_plugins()  # extensions from files outside the package (SPECDEC_PLUGINS)
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"specdec: error: unknown subcommand {name!r}: use one of {', '.join(COMMANDS)} "
            "(`specdec --help` says what each does)",
            file=sys.stderr,
        )
        return 2
    try:
        add_arguments, run = command(COMMANDS[name][0])
    except ModuleNotFoundError as e:
        return missing_extra(name, e)
    parser = _Parser(
        prog=f"specdec {name}", description=COMMANDS[name][1], formatter_class=HelpFormatter
    )
    add_arguments(parser)
    parser.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)
    for sub in _subparsers(parser):  # `trace record`, `bench read`, ...: the same help format
        sub.formatter_class = HelpFormatter
        sub.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                         help=QUIET_HELP)  # fmt: skip
    try:
        args = parser.parse_args(rest)
    except SystemExit as e:  # --help (0) or a usage error (2: its one line, `_Parser.error`)
        return e.code if isinstance(e.code, int) else 2
    if args.quiet:  # the environment, so the processes a command starts are quiet too
        os.environ[QUIET_ENV] = "1"
    try:
        return int(run(args) or 0)
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        return missing_extra(name, e)
    except OSError as e:
        if e.errno not in _PATH_ERRNOS or e.filename is None:
            raise  # not the user's path: a bug, with its traceback
        # a path the user gave that the file system refuses (too long, below a file, ...), as
        # `cp` says it: the file and the reason
        print(f"specdec: error: {e.filename}: {e.strerror}; give another path", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
