"""What a load carries down its walk besides the template and the state,
and what it does where the two differ.

One :class:`LoadContext` is made per load (``api.load`` makes it with the
load's report; ``from_state_dict`` takes the strict default) and passed
down the walk explicitly: nothing is held in process-wide or context-wide
variables, so two loads (two threads, or a load inside a migration) never
see each other's.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

import jax
import numpy as np

from ._warnings import outside
from .errors import TemplateMismatchError, format_path
from .format.reader import LazyArray
from .format.tree_codec import TYPE, VERSION
from .migrations import Loading
from .partial_load import LoadReport


@dataclasses.dataclass(frozen=True)
class LoadContext:
    """The load a value of the walk belongs to.

    Attributes:
      report: the :class:`LoadReport` of a load from a file (which names
        the file and says whether the load is strict), counting the values
        restored; None (``from_state_dict``): strict, nothing counted.
      dtype_from_file: inside a registration's ``dtype_from_file`` field:
        a floating-point array keeps the file's precision where the
        template's differs only in precision.
      loading: the registered objects whose fields are being restored
        around this value, outermost first, each with the fields restored
        so far: what a migration sees (``MigrationContext.enclosing``).
      exact: a trial of a provisional field (:meth:`trial`): the file's
        value must have the template's structure as stored, converted in
        no way (no Python number for an array or back, no int for a float,
        no other precision, no None for a value or a value for None).
      held: the warnings of a trial, held until it is adopted; None: shown
        at once.
    """

    report: LoadReport | None = None
    dtype_from_file: bool = False
    loading: tuple[Loading, ...] = ()
    exact: bool = False
    held: list[str] | None = None

    @property
    def lenient(self) -> bool:
        """A non-strict load: a difference keeps the template's value."""
        return self.report is not None and not self.report.strict

    def inside(self, template, restored: dict) -> LoadContext:
        """This context for the fields of the registered object ``template``
        (``restored``: its fields restored so far, filled by the caller)."""
        return dataclasses.replace(self, loading=self.loading + (Loading(template, restored),))

    def with_dtype_from_file(self) -> LoadContext:
        return self if self.dtype_from_file else dataclasses.replace(self, dtype_from_file=True)

    def trial(self) -> LoadContext:
        """This context for a trial load of a provisional field: strict and
        exact, counting in a report of its own and holding its warnings,
        which :meth:`adopt` takes if the trial's result is used."""
        return dataclasses.replace(self, report=LoadReport(strict=True), exact=True, held=[])

    def adopt(self, trial: LoadContext) -> None:
        """Takes the count and the warnings of ``trial`` (made by
        :meth:`trial`), whose result the load uses."""
        if self.report is not None:
            self.report.restored += trial.report.restored
        for message in trial.held:
            self.warn(message)

    def warn(self, message: str) -> None:
        """Shows ``message`` as a warning at the caller's line outside
        nkserde, or holds it in a trial."""
        if self.held is not None:
            self.held.append(message)
        else:
            warnings.warn(message, stacklevel=outside())

    def count(self) -> None:
        """One array or scalar restored from the file."""
        if self.report is not None:
            self.report.restored += 1

    def keep_template(self, path, kind: str, template, why: str = ""):
        """``template``, kept at ``path`` by a non-strict load and named in
        its report (``kind``: a key of ``partial_load.KINDS``)."""
        self.report.add(path, kind, why)
        return template

    def differs(self, path, state, template, why: str | None = None, error: Exception | None = None, *, both=False):
        """Where the file's value ``state`` does not fit ``template``: the
        template's value, kept and named in the report, when the load is
        lenient; else raises ``error`` (default: a TemplateMismatchError
        naming both)."""
        if self.lenient:
            why = why or (f"file has {describe(state)}" + (f", template has {describe(template)}" if both else ""))
            return self.keep_template(path, "differs", template, why)
        raise error if error is not None else mismatch(path, state, template)


def describe(x) -> str:
    """``x`` in a few words, as mismatch messages name the file's and the
    template's values: a stored object's type and schema version, an
    array's dtype and shape, a dict's first keys, a sequence's length."""
    if isinstance(x, dict) and TYPE in x:
        return f"{x[TYPE]} (schema version {x.get(VERSION)})"
    if isinstance(x, (np.ndarray, jax.Array, np.generic, LazyArray)):
        return f"array {x.dtype}{list(x.shape)}"
    if isinstance(x, Mapping):
        return f"dict with keys {sorted(map(str, x))[:8]}"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of length {len(x)}"
    if x is None:
        return "None"
    return f"{type(x).__name__} {x!r}"[:80]


def mismatch(path, found, template, why: str = "") -> TemplateMismatchError:
    """The error of a value ``found`` in the file where the template holds
    ``template``, at ``path``."""
    why = f" ({why})" if why else ""
    return TemplateMismatchError(
        f"{format_path(path)}: file has {describe(found)}, template has {describe(template)}{why}"
    )
