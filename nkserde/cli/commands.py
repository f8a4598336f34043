"""The ``nkserde`` command line: inspect, verify, diff, ls and migrate
checkpoints from a shell.

    nkserde inspect FILE [--arrays]   metadata and the tree of entries
    nkserde verify FILE...            every checksum and the structure
    nkserde diff A B [--atol --rtol]  what differs (exit 0 same, 1 different, 2 error)
    nkserde ls DIR                    the checkpoints of a run and which one a resume loads
    nkserde migrate IN [OUT]          rewrite at today's format and schema versions

Every subcommand takes ``--json`` (layout: docs/cli.md). Errors are one line
on stderr and a non-zero exit code; ``--debug`` shows the traceback. Output
uses rich in a terminal and is plain text otherwise (a pipe, a file).

This module is the program's front: its arguments (:func:`build_parser`)
and :func:`main`. Each command is a module of its own
(``inspect_command.py``, ``verify_command.py``, ``diff_command.py``,
``ls_command.py``, ``migrate_command.py``); ``output.py`` holds how they
print, ``command_error.py`` their one-line error.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from .command_error import CommandError
from .diff_command import cmd_diff
from .inspect_command import cmd_inspect
from .ls_command import cmd_ls
from .migrate_command import cmd_migrate
from .verify_command import cmd_verify

# inspect, verify, ls and an up-to-date migrate --dry-run read headers and
# checksums only, without JAX and NetKet (seconds of imports on a login
# node): diff and a migration import them when they run.


# the parser ---------------------------------------------------------------------


EPILOG = """exit codes: 0 success; 1 a problem was found (verify: a file does not verify; diff: the files
differ) or the command failed; 2 usage errors, and diff's errors (diff's convention).
--json layouts: docs/cli.md."""


def _common(p: argparse.ArgumentParser):
    p.add_argument("--json", action="store_true", help="machine-readable output (layout: docs/cli.md)")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nkserde",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="Inspect, verify, compare, list and migrate nkserde files and checkpoint "
        "directories, without writing Python.",
    )
    parser.add_argument("--version", action="version", version=f"nkserde {_version()}")
    parser.set_defaults(error_code=1)  # an error's exit code; diff's is 2
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "inspect",
        help="metadata and the tree of entries of a file (reads the header only)",
        description="Metadata (format version, nkserde/NetKet/JAX versions that wrote the file, "
        "creation time, process count, root type, schema versions) and every entry: "
        "path, dtype, shape, bytes on disk, codec, stored type and schema version. "
        "Reads the header only, so a file of any size inspects at once.",
    )
    p.add_argument("file", metavar="FILE", help="an nkserde file (e.g. ckpt/run-0/step-0000000030.nks)")
    p.add_argument(
        "--arrays",
        action="store_true",
        help="read the arrays too and add min/max/mean and the counts of NaN and inf "
        "(complex arrays: min/max of the absolute value)",
    )
    _common(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "verify",
        help="check every checksum and the structure; exit 1 if any file fails",
        description="Reads each file whole and checks the header, every array checksum and "
        "the structure. Prints one line per file: ok, or the problem. A checkpoint "
        "directory stands for all its checkpoints. Exit 0 when all are good, 1 "
        "otherwise.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="files or checkpoint directories")
    _common(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "diff",
        help="compare two files; exit 0 same, 1 different, 2 error",
        description="Entries present in one file only, entries whose dtype or shape differ, "
        "scalars that differ, and for arrays whose values differ the max absolute "
        "and relative difference and the count of differing elements. Both files "
        "are read at today's schema versions, so files of different format or "
        "schema versions compare. A checkpoint compared with a file of its driver "
        "compares the driver. A directory stands for its newest checkpoint that "
        "verifies. Elements differ where |a - b| > atol + rtol * |b| (NaN equals "
        "NaN). The wall-clock series of the loggers' histories are left out (--wall-clock), "
        "and any path given to --exclude. Exit 0 same, 1 different, 2 error.",
    )
    p.add_argument("a", metavar="A", help="a file or checkpoint directory")
    p.add_argument("b", metavar="B", help="a file or checkpoint directory")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default: 0, exact)")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default: 0, exact)")
    p.add_argument(
        "--exclude",
        metavar="PATH",
        action="append",
        default=[],
        help="leave out the entries at PATH and under it, a pattern where * matches any part "
        "(e.g. 'loggers/*', 'driver/state/sampler_state'); may be given again",
    )
    p.add_argument(
        "--wall-clock",
        action="store_true",
        help="compare the wall-clock series of the loggers' histories too (NetKet logs each step's "
        "time.perf_counter() as 'wallclock'; left out by default: it differs between two identical runs)",
    )
    _common(p)
    p.set_defaults(func=cmd_diff, error_code=2)  # 1 says the files differ

    p = sub.add_parser(
        "ls",
        help="the checkpoints of a checkpoint directory, and which one a resume loads",
        description="For a Checkpoint directory, or each run-<i>/ of a checkpointed(...) "
        "directory: the run's fingerprint and each checkpoint's step (and time, "
        "for TDVP), size, creation time, whether it verifies, the last value of "
        "the main loss its logger history holds (e.g. Energy -10.0053 ± 0.0021), "
        "and the one a resume would load: the newest that verifies.",
    )
    p.add_argument("directory", metavar="DIR", help="a checkpoint directory")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="do not read the checkpoints whole to verify them (faster; no resume choice)",
    )
    _common(p)
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser(
        "migrate",
        help="rewrite a file at today's format and schema versions",
        description="Rewrites IN at today's file format and schema versions (nkserde.migrate), "
        "atomically, to OUT (default: <stem>.migrated<suffix> beside IN). Never "
        "overwrites IN unless --in-place, which first copies it to IN.bak.",
    )
    p.add_argument("input", metavar="IN", help="an nkserde file")
    p.add_argument("output", metavar="OUT", nargs="?", help="where to write")
    p.add_argument("--dry-run", action="store_true", help="list what would change; write nothing")
    p.add_argument("--in-place", action="store_true", help="replace IN, keeping a backup IN.bak")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument(
        "--template",
        metavar="SCRIPT.py:FUNCTION",
        help="the template, for a migration that needs one (a Metropolis sampler state of schema 1): "
        "FUNCTION() of your script builds it, as for nkserde.migrate(..., template=); the script's "
        'top level runs, its `if __name__ == "__main__":` part does not (MODULE:FUNCTION works too)',
    )
    _common(p)
    p.set_defaults(func=cmd_migrate)
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
