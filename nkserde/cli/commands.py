"""The ``nkserde`` command line: inspect, verify, diff, ls, migrate
checkpoints and look at a run's history from a shell.

    nkserde inspect FILE [--arrays]   metadata and the tree of entries
    nkserde verify FILE...            every checksum and the structure
    nkserde diff A B [--atol --rtol]  what differs (exit 0 same, 1 different, 2 error)
    nkserde ls DIR                    the checkpoints of a run and which one a resume loads
    nkserde migrate IN [OUT]          rewrite at today's format and schema versions
    nkserde history DIR               every logged quantity per step, across restarts
    nkserde plot DIR -o run.png       the same drawn (matplotlib: the "plot" extra)

Every subcommand takes ``--json`` (layout: docs/cli.md). Errors are one line
on stderr and a non-zero exit code; ``--debug`` shows the traceback. Output
uses rich in a terminal and is plain text otherwise (a pipe, a file).

This module is the program's front: its arguments (:func:`build_parser`)
and :func:`main`. Each command is a module of its own
(``inspect_command.py``, ``verify_command.py``, ``diff_command.py``,
``ls_command.py``, ``migrate_command.py``, ``history_command.py``,
``plot_command.py``); ``output.py`` holds how they
print, ``command_error.py`` their one-line error.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from . import (
    diff_command,
    history_command,
    inspect_command,
    ls_command,
    migrate_command,
    plot_command,
    verify_command,
)
from .command_error import CommandError

# inspect, verify, ls, history and an up-to-date migrate --dry-run read
# headers and checksums only, without JAX and NetKet (seconds of imports on
# a login node): diff and a migration import them when they run, plot
# matplotlib when it draws.


# the parser ---------------------------------------------------------------------


EPILOG = """exit codes: 0 success; 1 a problem was found (verify: a file does not verify; diff: the files
differ) or the command failed; 2 usage errors, and the errors of diff, history and plot.
--json layouts: docs/cli.md."""


# in --help's order
COMMANDS = (inspect_command, verify_command, diff_command, ls_command, migrate_command, history_command, plot_command)


def _common(p: argparse.ArgumentParser):
    """The arguments every command takes, after its own."""
    p.add_argument("--json", action="store_true", help="machine-readable output (layout: docs/cli.md)")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nkserde",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="Inspect, verify, compare, list and migrate nkserde files and checkpoint "
        "directories, and show or plot a run's logged history, without writing Python.",
    )
    parser.add_argument("--version", action="version", version=f"nkserde {_version()}")
    parser.set_defaults(error_code=1)  # an error's exit code; diff's, history's and plot's is 2
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        _common(command.add_parser(sub))
    return parser


def _version() -> str:
    from .. import __version__

    return __version__


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or text}"
    return text or type(exc).__name__


def main(argv=None) -> int:
    """The console script ``nkserde`` and ``python -m nkserde``."""
    parser = build_parser()
    args = parser.parse_args(argv)

    def warn(message, category, filename, lineno, file=None, line=None):
        # e.g. "skipping checkpoint ...: why": one line, like the errors
        print(f"nkserde {args.command}: warning: {_one_line(message)}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = warn
        return _run(args)


def _run(args) -> int:
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `nkserde inspect ... | head`
        sys.stderr.close()
        return 0
    except Exception as exc:
        if args.debug:
            raise
        code = exc.code if isinstance(exc, CommandError) and exc.code is not None else args.error_code
        print(f"nkserde {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return code
