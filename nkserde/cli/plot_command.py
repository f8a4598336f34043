"""``nkserde plot DIR -o run.png``: each chosen quantity of a run's history
against the step (nkserde.cli.history_command reads and chooses them), the
Monte Carlo error as a band where one was logged, every restart a vertical
line, the steps run again shaded, the exact value a line (``--exact``).
matplotlib is an optional extra (``pip install "nkserde[plot]"``),
imported by this command alone, when it draws; the figure is matplotlib's
``Figure`` itself, without pyplot: no window, no backend to choose."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from ..format.atomic import atomic_write
from . import history_command
from .command_error import CommandError
from .output import Output, print_json

FORMATS = ("png", "svg", "pdf")
DPI = 100  # --size is in pixels: inches of the figure times this
WIDTH = 1000  # pixels, by default
HEIGHT_EACH = 260  # pixels per quantity, by default (and 80 for the title and the axis)
NOT_BY_DEFAULT = ("wallclock",)  # NetKet's time.perf_counter() at each step: a timer, not a quantity of the run


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde plot`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
    p = sub.add_parser(
        "plot",
        help="each logged quantity against the step, restarts marked: a PNG, SVG or PDF image",
        description="Draws what nkserde history shows: each chosen quantity against the step (or TDVP's "
        "time), one panel each, the Monte Carlo error (Sigma) as a band around the Mean where it was "
        "logged, every restart as a vertical line, the steps known to have been run again shaded, and "
        "the exact value given with --exact as a line on the first panel (the driver's loss, which "
        "NetKet logs first). All quantities but NetKet's wallclock by default; complex values by their "
        'real part. Needs matplotlib: pip install "nkserde[plot]". Exit 0, or 2 on an error.',
    )
    p.add_argument("path", metavar="DIR", help="a checkpoint directory (or one checkpoint file)")
    p.add_argument(
        "-o", "--output", metavar="FILE", required=True, help="the image to write: .png, .svg or .pdf (replaced whole)"
    )
    history_command.add_keys_argument(p)
    p.add_argument("--exact", type=float, metavar="VALUE", help="draw this value (the exact energy) as a line")
    p.add_argument(
        "--size",
        metavar="WxH",
        help=f"the image's size in pixels, at {DPI} per inch (default {WIDTH} wide, {HEIGHT_EACH} high per quantity)",
    )
    p.set_defaults(func=cmd_plot, error_code=2)
    return p


def _size(text: str | None, panels: int) -> tuple[int, int]:
    if text is None:
        return WIDTH, 80 + HEIGHT_EACH * panels
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m or not (100 <= int(m.group(1)) <= 20000 and 100 <= int(m.group(2)) <= 20000):
        raise CommandError(f"--size {text}: expected WIDTHxHEIGHT in pixels, each 100 to 20000 (e.g. 1200x800)")
    return int(m.group(1)), int(m.group(2))


def _format(output: Path) -> str:
    kind = output.suffix.lower().lstrip(".")
    if kind not in FORMATS:
        raise CommandError(f"{output}: the image's name ends in .png, .svg or .pdf, which says its format")
    return kind


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise CommandError(f'nkserde plot needs matplotlib ({exc}): pip install "nkserde[plot]"') from None
    return Figure


def panels_of(found: list) -> list[tuple[str, str | None]]:
    """(quantity, field or None for its value) of each panel, in logged
    order: a quantity chosen whole draws its value (NetKet's main field)
    and its error band, a field chosen alone a panel of its own.
    Quantities of arrays are left out unless a field of them was named
    (then refused: no curve to draw)."""
    panels: list = []
    for h, chosen in found:
        for name, wanted in chosen.items():
            for field in wanted:
                if field is None and (h.main(name) is None or h[name][h.main(name)].ndim != 1):
                    continue
                if field is not None and h[name][field].ndim != 1:
                    raise CommandError(f"{name}/{field}: logged as arrays, not numbers: there is no curve to draw")
                if (name, field) not in panels:
                    panels.append((name, field))
    return panels


def cmd_plot(args) -> int:
    output = Path(args.output)
    kind = _format(output)
    found = history_command.read(args)
    if not args.keys:  # the run's quantities, not NetKet's clock
        found = [(h, {n: f for n, f in chosen.items() if n not in NOT_BY_DEFAULT}) for h, chosen in found]
    panels = panels_of(found)
    if not panels:
        raise CommandError(f"{args.path}: nothing logged that is a number per step to draw (--keys chooses)")
    width, height = _size(args.size, len(panels))
    # matplotlib last: what the arguments and the directory get wrong is
    # said whether or not the extra is installed
    figure = draw(_figure_class(), found, panels, (width, height), args.exact, title=str(args.path))
    with atomic_write(output) as f:
        figure.savefig(f, format=kind, dpi=DPI)
    restarts = sum(len(h.restarts) for h, _ in found)
    if args.json:
        print_json(
            {
                "output": str(output),
                "format": kind,
                "size": [width, height],
                "panels": [name if field is None else f"{name}/{field}" for name, field in panels],
                "restarts": restarts,
            }
        )
    else:
        shown = ", ".join(name if field is None else f"{name}/{field}" for name, field in panels)
        Output().line(f"{output}: {shown}; {history_command.restarts_said(restarts)} marked ({width}x{height})")
    return 0


def draw(figure_class, found: list, panels: list, size: tuple[int, int], exact: float | None, title: str):
    """The figure: a panel per (quantity, field) of ``panels``, each run of
    ``found`` a curve in it, its restarts marked."""
    from matplotlib.ticker import MaxNLocator

    figure = figure_class(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    several = len(found) > 1
    for ax, (name, field) in zip(axes, panels):
        for k, (h, _) in enumerate(found):
            if name not in h:
                continue
            color = f"C{k}"
            label = f"run {h.run}" if several and h.run is not None else None
            _curve(ax, h, name, field, color, label)
            _restarts(ax, h, color if several else "0.35")
        first = next(h for h, _ in found if name in h)
        banded = field is None and first.main(name) == "Mean" and "Sigma" in first[name]
        ax.set_ylabel(f"{name} (Mean ± Sigma)" if banded else name if field is None else f"{name}/{field}")
        ax.grid(True, alpha=0.3)
        integer = all(h[name]["iters"].dtype.kind in "iu" for h, _ in found if name in h)
        ax.set_xlabel("step" if integer else "time")
        if integer:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if exact is not None:
        axes[0].axhline(exact, color="black", linestyle=":", linewidth=1.2, label=f"exact {exact:.10g}")
    for ax in axes:
        if ax.get_legend_handles_labels()[1]:
            ax.legend(loc="best", fontsize="small")
    figure.suptitle(title, fontsize="medium")
    return figure


def _curve(ax, h, name: str, field: str | None, color: str, label: str | None) -> None:
    columns = h[name]
    x = np.asarray(columns["iters"])
    main = field or h.main(name)
    y = np.asarray(columns[main])
    y = y.real if np.iscomplexobj(y) else y
    ax.plot(x, y, color=color, linewidth=1.4, marker="." if len(x) < 60 else None, label=label)
    sigma = columns.get("Sigma") if field is None and main == "Mean" else None
    if sigma is not None and sigma.ndim == 1:
        s = np.abs(np.asarray(sigma))
        ax.fill_between(x, y - s, y + s, color=color, alpha=0.25, linewidth=0)


def _restarts(ax, h, color) -> None:
    for i, r in enumerate(h.restarts, start=1):
        if r.redone is not None:
            ax.axvspan(r.redone[0], r.redone[1], color="tab:red", alpha=0.08, linewidth=0)
        if r.at is not None:
            ax.axvline(r.at, color=color, linestyle="--", linewidth=1)
            ax.annotate(
                f"restart {i}",
                (r.at, 1),
                xycoords=("data", "axes fraction"),
                xytext=(3, -3),
                textcoords="offset points",
                va="top",
                fontsize="x-small",
                color=color,
            )
