"""nkserde state dicts -> objects: the walk of a load.

:func:`from_state_dict` walks the *template*, as flax does: the template
decides the structure and the types, the state dict (of a file, its
arrays read only where the template asks for them) provides the numbers.
What the load is (strict or lenient, its report, the objects around a
value) comes down the walk in a :class:`LoadContext`, made once per load
and passed explicitly: two loads (two threads, or a load inside a
migration) never see each other's.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from .._warnings import outside
from ..types import builtin_types, migrations, registry
from . import device_arrays, provisional_fields
from ..errors import TemplateMismatchError, UnregisteredTypeError, format_path
from ..format.reader import LazyArray, materialize
from ..format import tree_codec
from ..format.tree_codec import TYPE, VERSION
from ..types.placement import GlobalArray, PerProcess, Primary, ProcessValues, Resizable
from ..types.migrations import Loading
from .partial_load import LoadReport
from ..saving.snapshot import SCALARS, stored_key


# --------------------------------------------------------------------------- the load's context


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
      check_only: only check that the file's value fits the template as
        stored (:meth:`checking`; where a provisional field is tried):
        exactly, converting nothing (no Python number for an array or
        back, no int for a float, no other precision, no None for a value
        or a value for None), and reading, building and placing nothing:
        the walk returns the template.
    """

    report: LoadReport | None = None
    dtype_from_file: bool = False
    loading: tuple[Loading, ...] = ()
    check_only: bool = False

    @property
    def lenient(self) -> bool:
        """A non-strict load: a difference keeps the template's value."""
        return self.report is not None and not self.report.strict

    def inside(self, template, restored: dict) -> LoadContext:
        """This context for the fields of the registered object ``template``
        (``restored``: its fields restored so far, filled by the caller)."""
        return dataclasses.replace(self, loading=self.loading + (Loading(template, restored),))

    def checking(self) -> LoadContext:
        """This context for a check (``check_only``): strict, counting
        nothing."""
        return dataclasses.replace(self, report=None, check_only=True)

    def warn(self, message: str) -> None:
        """Shows ``message`` as a warning at the caller's line outside
        nkserde (a check warns nothing: the load that follows it does)."""
        if not self.check_only:
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
            why = why or (
                f"file has {in_few_words(state)}" + (f", template has {in_few_words(template)}" if both else "")
            )
            return self.keep_template(path, "differs", template, why)
        raise error if error is not None else mismatch(path, state, template)


def in_few_words(x) -> str:
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
        f"{format_path(path)}: file has {in_few_words(found)}, template has {in_few_words(template)}{why}"
    )


# The context of from_state_dict: strict, nothing counted.
STRICT = LoadContext()


# --------------------------------------------------------------------------- the walk


def from_state_dict(template, state, path=(), ctx: LoadContext = STRICT) -> Any:
    """A new object shaped like ``template`` holding the values of ``state``.
    The template is not mutated. ``ctx``: the load this is part of (see
    :class:`LoadContext`); by default strict: every difference raises
    TemplateMismatchError. With a non-strict report the load is lenient:
    an entry missing in ``state``, or whose shape, dtype or type differs,
    keeps the template's value and an entry of ``state`` the template has
    no place for is not used, each named in the report."""
    if state is None:  # an optional value that was unset when saved
        if ctx.check_only and _unwrap(template) is not None:
            raise mismatch(path, state, template)
        return None
    if isinstance(state, LazyArray) and not isinstance(template, (jax.Array, Resizable)) and not ctx.check_only:
        state = state.read()  # an array of a file is read when, and only if, the template asks for it
    if isinstance(template, Primary):
        template = template.value
    if isinstance(state, Primary):  # an in-memory state dict
        state = state.value
    if isinstance(template, PerProcess) or isinstance(state, (PerProcess, ProcessValues)):
        return _restore_per_process(template, state, path, ctx)
    if isinstance(template, Resizable):  # the file's rows cut or filled to the template's (read only then)
        return from_state_dict(template.value, _resize(template.value, state, path, ctx, template.announce), path, ctx)
    if builtin_types.is_key_array(template):
        return _restore_node(registry.lookup(builtin_types.KeyArray), template, state, path, ctx)
    if isinstance(template, (np.ndarray, np.generic, jax.Array)):
        return _restore_array(template, state, path, ctx)
    if template is None:
        if ctx.check_only:
            raise mismatch(path, state, template)
        return _untemplated(state, path, ctx)
    if isinstance(template, SCALARS):
        return _restore_scalar(template, state, path, ctx)
    reg = registry.lookup(type(template))
    if reg is not None:
        return _restore_node(reg, template, state, path, ctx)
    if isinstance(template, Mapping):
        if not isinstance(state, dict) or TYPE in state:
            return ctx.differs(path, state, template)
        keys = {stored_key(k, path): k for k in template}
        _check_keys(path, state, keys, template, ctx)
        restored = {
            k: from_state_dict(template[k], state[s], path + (s,), ctx) if s in state else _unwrap(template[k])
            for s, k in keys.items()
        }
        return restored if type(template) is dict else type(template)(restored)
    if type(template) in (list, tuple):
        if not isinstance(state, list) or len(state) != len(template):
            return ctx.differs(path, state, template, both=True)
        out = [from_state_dict(t, s, path + (i,), ctx) for i, (t, s) in enumerate(zip(template, state))]
        return out if type(template) is list else tuple(out)
    raise registry.unregistered(template, path)


def _check_keys(path, state, keys, template, ctx: LoadContext):
    found = set(tree_codec.fields_of(state))
    missing, extra = sorted(set(keys) - found), sorted(found - set(keys))
    if ctx.lenient:
        for k in missing:
            ctx.keep_template(path + (k,), "missing", None)
        for k in extra:
            ctx.keep_template(path + (k,), "unexpected", None)
        return
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing in file: {missing}")
        if extra:
            parts.append(f"not in template: {extra}")
        raise mismatch(path, state, template, "; ".join(parts))


def _restore_node(reg: registry.Registration, template, state, path, ctx: LoadContext):
    if not isinstance(state, dict) or not isinstance(state.get(TYPE), str):
        raise mismatch(path, state, template, f"expected a stored {reg.name}")
    stored, version = registry.lookup_name(state[TYPE]), state.get(VERSION)
    if stored is None:
        raise UnregisteredTypeError(
            f"{format_path(path)}: the file holds type {state[TYPE]!r}, which has no registration here "
            f"(the template expects {reg.name})"
        )
    name, shared = stored.name, None  # shared: the fields a transfer between kinds takes
    if name != reg.name:
        shared = registry.transfer_fields(name, reg.name)
        if not ctx.lenient or shared is None:
            why = f"file has {name}, template has {reg.name}"
            hint = (
                f"; a load of the {sorted(shared)} of one into the other needs strict=False"
                if shared is not None
                else ""
            )
            return ctx.differs(path, state, template, why, TemplateMismatchError(f"{format_path(path)}: {why}{hint}"))
    if not isinstance(version, int) or isinstance(version, bool):
        raise mismatch(path, state, template, "malformed schema version")
    fields, current = tree_codec.fields_of(state), reg.version if shared is None else stored.version
    if version != current:
        fields = materialize(fields)  # migrations see numpy arrays
    # a transfer's migrations get no template: it is of another kind
    into = template if shared is None else None
    fields = migrations.upgrade(name, version, fields, current, path, template=into, enclosing=ctx.loading)
    template_fields = reg.to_state(template)
    keys = {stored_key(k, path): k for k in template_fields}
    expected = {s: k for s, k in keys.items() if s in fields or s not in reg.optional_fields}
    if shared is not None:  # another kind of the same family: take the shared fields only
        why = f"{name} -> {reg.name}: transfers {', '.join(sorted(shared))} only"
        for s in sorted(set(fields) - shared):
            ctx.keep_template(path + (s,), "unexpected", None, why)
        for s in sorted(set(keys) - shared):
            ctx.keep_template(path + (s,), "missing", None, why)
        fields = {s: v for s, v in fields.items() if s in shared}
        expected = {s: k for s, k in keys.items() if s in shared}
    # a field of some library versions only: absent on one side, it is the
    # template's (absent in the file) or not used (absent in the template)
    for s in reg.optional_fields:
        if s in fields and s not in keys:
            del fields[s]
    _check_keys(path, fields, expected, template, ctx)
    restored = {}
    inner = ctx.inside(template, restored)  # what the migrations of the fields' values see
    for s, k in keys.items():
        if s not in fields:  # optional or (non-strict) missing in the file, or not transferred
            restored[k] = _unwrap(template_fields[k])
        elif s in reg.free_fields:
            if not ctx.check_only:  # whatever the file holds there is taken
                restored[k] = _untemplated(fields[s], path + (s,), inner, to_jax=False)
        else:
            field_ctx = dataclasses.replace(inner, dtype_from_file=True) if s in reg.dtype_from_file else inner
            into = template_fields[k]
            if s in reg.provisional:  # the template's value, or one its first steps give it, that the file's fits
                fits = functools.partial(_fits, state=fields[s], path=path + (s,), ctx=field_ctx)
                into = provisional_fields.value_to_load_into(reg.provisional[s], template, into, fits)
            restored[k] = from_state_dict(into, fields[s], path + (s,), field_ctx)
    if ctx.check_only:
        return template
    if not ctx.lenient:
        return reg.from_state(template, restored)
    try:
        return reg.from_state(template, restored)
    except TemplateMismatchError as exc:
        return ctx.keep_template(path, "differs", template, str(exc))


def _fits(template, state, path, ctx: LoadContext) -> bool:
    """Whether ``state`` fits ``template`` as stored (a check of the walk,
    see ``LoadContext.check_only``)."""
    try:
        from_state_dict(template, state, path, ctx.checking())
    except TemplateMismatchError:
        return False
    return True


def _unwrap(value):
    """A template's field value without the layout markers of placement.py."""
    while isinstance(value, (Primary, PerProcess, Resizable)):
        value = value.value
    return value


def _restore_per_process(template, state, path, ctx: LoadContext):
    """This process's value of a per-process field (see placement.PerProcess)."""
    derive = template.derive if isinstance(template, PerProcess) else None
    template = template.value if isinstance(template, PerProcess) else template
    if isinstance(state, PerProcess):  # an in-memory state dict: this process's own value
        return from_state_dict(template, state.value, path, ctx)
    if not isinstance(state, ProcessValues):  # saved before the field was per-process
        return from_state_dict(template, state, path, ctx)
    saved, rank = len(state.values), jax.process_index()
    if not saved:
        raise mismatch(path, state, template, "no saved process values")
    value = from_state_dict(template, state.values[rank % saved], path, ctx)
    if ctx.check_only:
        return value
    if rank == 0 and jax.process_count() < saved:
        ctx.warn(
            f"nkserde: {format_path(path)}: saved by {saved} processes, loaded by "
            f"{jax.process_count()}: the values of processes {jax.process_count()}.."
            f"{saved - 1} are not used"
        )
    copy = rank // saved
    if copy:
        if derive is None:
            ctx.warn(
                f"nkserde: {format_path(path)}: process {rank} reuses the saved value of "
                f"process {rank % saved} unchanged (saved by {saved} processes)"
            )
        else:
            value = derive(value, copy)
    return value


def _resize(template, state, path, ctx: LoadContext, announce=True):
    """``state`` with its leading axis cut or filled to the template's length
    (see placement.Resizable), read; unchanged if the shapes already agree.
    In a check, the shape and dtype it would have (nothing is read)."""
    if not isinstance(state, (np.ndarray, LazyArray)) or not hasattr(template, "shape"):
        return state
    t_shape = tuple(template.shape)
    if state.shape == t_shape or state.ndim == 0 or state.shape[1:] != t_shape[1:] or not state.shape[0]:
        return state
    if ctx.check_only:
        return jax.ShapeDtypeStruct(t_shape, state.dtype)
    state = state.read() if isinstance(state, LazyArray) else state
    saved, wanted = state.shape[0], t_shape[0]
    if wanted < saved:
        how = f"keeps the first {wanted}"
    else:
        how = f"keeps all {saved} and fills {wanted - saved} by repeating them"
    if announce:
        ctx.warn(f"nkserde: {format_path(path)}: the file has {saved} chains, the template {wanted}: the load {how}")
    return state[np.arange(wanted) % saved]


def _restore_array(template, state, path, ctx: LoadContext):
    if isinstance(state, GlobalArray):  # from state_dict() in a multi-process run: this process's blocks
        state = device_arrays.LocalBlocks(state, path)
    if ctx.check_only:
        return _check_array(template, state, path)
    if isinstance(state, LazyArray) and (not isinstance(template, jax.Array) or template.is_fully_addressable):
        state = state.read()
    if not isinstance(state, (np.ndarray, LazyArray)):
        if isinstance(state, SCALARS) and np.ndim(template) == 0:
            state = np.asarray(state)  # a Python number where an array scalar is expected
            if state.dtype.kind != np.asarray(template).dtype.kind:
                return ctx.differs(path, state, template)
            state = state.astype(template.dtype)
        else:
            return ctx.differs(path, state, template, both=True)
    t_shape, t_dtype = tuple(np.shape(template)), np.dtype(template.dtype)
    # files are little-endian; the template's byte order is a layout detail
    if state.shape == t_shape and ctx.dtype_from_file and _precision_only(state.dtype, t_dtype):
        t_dtype = state.dtype  # the run changed it after the template was built
    if state.shape != t_shape or state.dtype != t_dtype.newbyteorder("<"):
        return ctx.differs(path, state, template, both=True)
    ctx.count()
    if state.dtype != t_dtype:
        state = materialize(state).astype(t_dtype)
    if isinstance(template, np.ndarray):
        return state
    if isinstance(template, np.generic):
        return state[()]
    return device_arrays.to_device(state, template)


def _check_array(template, state, path):
    """The template, where the file's ``state`` (read or not, or the shape
    a resize gives it) has its shape and dtype exactly; else raises."""
    fits = (
        isinstance(state, (np.ndarray, LazyArray, jax.ShapeDtypeStruct))
        and tuple(state.shape) == tuple(np.shape(template))
        and np.dtype(state.dtype) == np.dtype(template.dtype).newbyteorder("<")
    )
    if not fits:
        raise mismatch(path, state, template)
    return template


def _precision_only(a: np.dtype, b: np.dtype) -> bool:
    """Both floating point (or both complex), of different precision."""
    for kind in (jax.numpy.floating, jax.numpy.complexfloating):
        if jax.numpy.issubdtype(a, kind) and jax.numpy.issubdtype(b, kind):
            return True
    return False


def _restore_scalar(template, state, path, ctx: LoadContext):
    if ctx.check_only:
        if type(state) is not type(template):
            raise mismatch(path, state, template)
        return template
    if isinstance(state, np.ndarray) and state.ndim == 0:
        state = state.item()
    # bool is a subclass of int; keep the two apart, let int widen to float.
    kinds = (bool, int, float, complex, str, bytes)
    t_kind = next(k for k in kinds if isinstance(template, k))
    s_kind = next((k for k in kinds if isinstance(state, k)), None)
    if s_kind is t_kind or (t_kind is float and s_kind is int) or (t_kind is complex and s_kind in (int, float)):
        ctx.count()
        try:
            return type(template)(state)  # keeps IntFlag, str subclasses...
        except (TypeError, ValueError):
            return t_kind(state)
    return ctx.differs(path, state, template)


def _untemplated(state, path, ctx: LoadContext, to_jax=True):
    """A value rebuilt from the file alone: where the template holds None
    (e.g. a momentum buffer created at the first step; arrays become JAX
    arrays) or for a registration's free fields (arrays stay numpy).
    Registered objects need a template."""
    if isinstance(state, LazyArray):
        state = state.read()
    if isinstance(state, ProcessValues):
        return _untemplated(state.values[jax.process_index() % len(state.values)], path, ctx, to_jax)
    if isinstance(state, dict):
        if TYPE in state:
            return _build_node(state, path, ctx, to_jax)
        return {k: _untemplated(v, path + (k,), ctx, to_jax) for k, v in state.items()}
    if isinstance(state, list):
        return [_untemplated(v, path + (i,), ctx, to_jax) for i, v in enumerate(state)]
    if isinstance(state, np.ndarray) and to_jax:
        return jax.device_put(state, device_arrays.replicated(), may_alias=True)
    return state


def _build_node(state, path, ctx: LoadContext, to_jax):
    """A stored object where the template holds None: only for types whose
    registration can rebuild them from their fields alone (``from_fields``),
    at their current schema version."""
    reg = registry.lookup_name(state[TYPE]) if isinstance(state[TYPE], str) else None
    version = state.get(VERSION)
    if reg is None or reg.from_fields is None or not isinstance(version, int):
        raise mismatch(path, state, None, "a stored object needs a template object to load into")
    fields = tree_codec.fields_of(state)
    fields = migrations.upgrade(reg.name, version, fields, reg.version, path, enclosing=ctx.loading)
    return reg.from_fields({k: _untemplated(v, path + (k,), ctx, to_jax) for k, v in fields.items()})
