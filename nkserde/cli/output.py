"""How the commands print: rich in a terminal, plain aligned text
otherwise (:class:`Output`); ``--json`` as strict JSON in one layout
(:func:`print_json`, docs/cli.md); and the text forms of sizes, times,
numbers, dtypes and shapes, versions that every command shares."""

from __future__ import annotations

import datetime
import io
import json
import math
import sys
import textwrap

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

JSON_LAYOUT_VERSION = 1  # of every --json output; bumped only when a field changes meaning or goes


NBSP = "\u00a0"  # a space that wrapping does not break at

NETKET_FORMATS = {"mpack": "flax msgpack, an .mpack", "nqxpack": "nqxpack"}


class Output:
    """rich in a terminal, plain aligned text otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.rich = self.stream.isatty()
        self.console = Console(file=self.stream, highlight=False) if self.rich else None

    def line(self, text: str = "", style: str | None = None):
        if self.rich:
            self.console.print(Text(text, style=style))
        else:
            self.stream.write(text + "\n")

    def wrapped(self, text: str, indent: int):
        """A long line; in a terminal wrapped at its width, continued under
        column ``indent``."""
        if not self.rich:
            return self.line(text.replace(NBSP, " "))
        for line in textwrap.wrap(
            text,
            width=max(40, self.console.width - 1),
            subsequent_indent=" " * indent,
            break_on_hyphens=False,
            break_long_words=False,
        ):
            self.line(line.replace(NBSP, " "))

    def table(self, columns, rows, title: str | None = None):
        table = Table(
            box=box.SIMPLE_HEAD if self.rich else None,
            show_edge=False,
            pad_edge=False,
            title=title if self.rich else None,
            title_justify="left",
            show_header=True,
            header_style="bold" if self.rich else None,
        )
        for name in columns:
            right = name in (
                "bytes",
                "size",
                "step",
                "differing",
                "max abs",
                "max rel",
                "min",
                "max",
                "mean",
                "nan",
                "inf",
                "time",
            )
            table.add_column(
                Text(name),
                justify="right" if right else "left",
                overflow="fold",
                no_wrap=name in ("path", "checkpoint"),
            )

        for row in rows:  # Text: a "[...]" in a path or value is not markup
            table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
        if self.rich:
            self.console.print(table)
            return
        if title:
            self.line(title)
        plain = Console(file=io.StringIO(), width=100_000, no_color=True, highlight=False)
        with plain.capture() as capture:
            plain.print(table)
        self.stream.write("".join(line.rstrip() + "\n" for line in capture.get().splitlines()))


def _strict(value):
    """Strict JSON: non-finite floats (a diverged run's NaN energy) as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def print_json(data) -> None:
    json.dump(_strict({"nkserde_json": JSON_LAYOUT_VERSION, **data}), sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_time(iso: str | None) -> str:
    if not isinstance(iso, str):
        return "-"
    try:
        when = datetime.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_number(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def format_shape(entry) -> str:
    return f"{entry['dtype']}[{', '.join(str(d) for d in entry['shape'])}]"


def format_versions(info: dict) -> str:
    return (
        f"format {info.get('format_version')}, nkserde {info.get('nkserde')}, NetKet {info.get('netket')}, "
        f"JAX {info.get('jax')}"
    )
