"""Files NetKet itself writes (foreign to nkserde's format: ``format/foreign.py``
tells them apart and reads their bytes), loaded into nkserde templates.

NetKet users hold years of them:

* ``.mpack``: ``flax.serialization.to_bytes`` of an MCState (``variables``,
  ``sampler_state``, ``n_samples``, ``n_discard_per_chain``,
  ``chunk_size``), of a FullSumState (``variables``), or of the variables
  alone (what ``JsonLog(save_params=True)`` writes beside its log);
* nqxpack files (``nk.logging.SaveVariationalState``, ``nqxpack.save``):
  a zip whose ``assets//state.msgpack`` member is the same flax state dict,
  beside ``object.json``, a configuration of class paths.

They are recognised by their content (msgpack map, zip with NetKet's
``metadata.json``), never by their extension. Only the flax state dict is
read, with nkserde's bounded reader of flax's encoding
(``format/flax_msgpack.py``) and within the load limits
(``format/bounded.py``): no more than the template can use is read or
inflated, whatever the file declares. ``object.json`` names classes to import
and is never used (nqxpack's own loader imports them). Nothing named by the
file is imported or executed.

What is taken: the variables (into ``parameters`` and ``model_state``), the
sampler state and the sample counts where the file has them. NetKet does
not store the Metropolis ``log_prob``; it is recomputed from the chains at
the loaded parameters, as NetKet's ``sampler.reset`` does. What a file does
not hold keeps the template's value (the sampler seed, always); a template
that is not a variational state or a variables dict is refused with a
message that says what the file holds.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jax
import netket as nk
import numpy as np

from . import device_arrays, walk
from ..netket import internals
from ..errors import CorruptFileError, LoadLimitError, TemplateMismatchError, format_path
from ..format import foreign, limits

# what a state file may hold beyond the arrays its template uses (sampler
# chains of an MCState loaded into a FullSumState, msgpack framing)
SLACK = 256 << 20
kind = foreign.netket_kind  # "nqxpack", "mpack" or None, from the file's content


def load(template, path):
    """``template`` with what the NetKet file at ``path`` holds (see the
    module docstring)."""
    path = Path(path)
    allowance = _allowance(template)
    try:
        state = _read(path, allowance)
    except LoadLimitError as exc:
        if allowance < limits.current().max_load_bytes:  # the template's bound, not the settable one
            raise LoadLimitError(
                f"{exc}; here the bound is what a {type(template).__name__} template can use: its arrays "
                f"four times over, or those and {SLACK >> 20} MiB"
            ) from None
        raise
    if not isinstance(state, dict):
        raise CorruptFileError(f"{path}: a NetKet file holds a map, not {type(state).__name__}")
    variables = state["variables"] if "variables" in state else state
    if not isinstance(variables, dict):
        raise CorruptFileError(f"{path}: variables: a map expected, the file has {type(variables).__name__}")
    try:
        if isinstance(template, nk.vqs.MCState):
            return _mc_state(template, state, variables)
        if isinstance(template, nk.vqs.FullSumState):
            new = copy.copy(template)
            new.reset()
            new.variables = _variables(template.variables, variables)
            return new
        if isinstance(template, dict):
            if "params" in template:
                return _variables(template, variables)
            return _variables({"params": template}, {"params": variables.get("params", {})})["params"]
    except TemplateMismatchError as exc:
        raise TemplateMismatchError(f"{path}: {exc}") from None
    holds = "an MCState" if "sampler_state" in state else "variational state variables"
    raise TemplateMismatchError(
        f"{path}: a NetKet file ({kind(path)}) holding {holds}; load it into an MCState or "
        f"FullSumState template, or a variables dict, not a {type(template).__name__}"
    )


def _allowance(template) -> int:
    """The most bytes of a NetKet file's state a load into ``template``
    reads: ``max_load_bytes``, and no more than the template can use (its
    arrays, four times over, or those and SLACK: a state file may also hold
    sampler chains that a FullSumState or a variables dict does not take)."""
    if isinstance(template, nk.vqs.MCState):
        parts = (template.variables, template.sampler_state)
    elif isinstance(template, nk.vqs.FullSumState):
        parts = template.variables
    else:  # a variables dict; anything else is refused once the file says what it holds
        parts = template if isinstance(template, dict) else ()
    usable = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree_util.tree_leaves(parts))
    return min(limits.current().max_load_bytes, max(4 * usable, usable + SLACK))


_read = foreign.read_netket_state


def _variables(template_variables, file_variables):
    """The file's variables in the template's structure, dtypes and
    shardings (mismatches name their path)."""
    template_variables = dict(template_variables)
    file_variables = _lists(file_variables, template_variables)
    _no_null_where_the_template_has_a_value(template_variables, file_variables, ("variables",))
    return walk.from_state_dict(template_variables, _np(file_variables), ("variables",))


def _no_null_where_the_template_has_a_value(template, value, path):
    # nkserde's own files store None for an optional value unset when saved,
    # and the walk loads it as None; NetKet's never hold a null where a
    # parameter is. (A key the file lacks is the walk's to name.)
    if value is None and template is not None:
        raise TemplateMismatchError(f"{format_path(path)}: the file has null, the template {type(template).__name__}")
    if isinstance(template, dict) and isinstance(value, dict):
        for k, t in template.items():
            if k in value:
                _no_null_where_the_template_has_a_value(t, value[k], (*path, k))


def _lists(node, template):
    # flax stores lists as maps with keys "0", "1", ...
    if isinstance(template, (list, tuple)) and isinstance(node, dict):
        return (
            [_lists(node[str(i)], t) for i, t in enumerate(template)]
            if set(node) == {str(i) for i in range(len(template))}
            else node
        )
    if isinstance(template, dict) and isinstance(node, dict):
        return {k: _lists(v, template.get(k)) for k, v in node.items()}
    return node


def _np(node):
    if isinstance(node, dict):
        return {str(k): _np(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_np(v) for v in node]
    if isinstance(node, (np.ndarray, np.generic)):
        return np.asarray(node)
    return node


def _mc_state(template, state, variables):
    new = copy.copy(template)
    new.reset()
    new.variables = _variables(template.variables, variables)
    for name in ("n_samples", "n_discard_per_chain", "chunk_size"):
        if name not in state:
            continue
        value = state[name]
        if isinstance(value, (np.ndarray, np.generic)) and value.ndim == 0 and np.issubdtype(value.dtype, np.integer):
            value = int(value)  # a count flax stored as a numpy scalar
        # checked before it is compared: an array would compare elementwise
        valid = value is None if name == "chunk_size" else False
        valid = valid or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 53)
        if not valid:
            raise TemplateMismatchError(f"{name}: the file has {value!r}"[:200] + ", not a count")
        if value != getattr(template, name):
            try:
                setattr(new, name, value)
            except (ValueError, TypeError) as exc:  # NetKet's own checks (e.g. n_samples=0)
                raise TemplateMismatchError(f"{name}: the file's {value} is refused by NetKet: {exc}") from None
    if "sampler_state" in state:
        if not isinstance(state["sampler_state"], dict):
            raise TemplateMismatchError(
                f"sampler_state: a map expected, the file has {type(state['sampler_state']).__name__}"
            )
        sampler_state = _sampler_state(new, state["sampler_state"])
        internals.set_sampler_state(new, sampler_state)
    return new


def _sampler_state(vs, stored):
    """The template's sampler state with the file's fields (NetKet's own
    attribute names, as flax writes them), log_prob recomputed."""
    from flax import serialization

    template = vs.sampler_state
    if not isinstance(template, nk.utils.struct.Pytree):
        raise TemplateMismatchError(
            f"{format_path(('sampler_state',))}: {type(template).__name__} (a numpy sampler's "
            f"state) cannot be taken from a NetKet file; it keeps the template's"
        )
    expected = serialization.to_state_dict(template)
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if missing or extra:
        raise TemplateMismatchError(
            f"sampler_state: the file's sampler state has fields {sorted(stored)}, the template's "
            f"{type(template).__name__} {sorted(expected)} (missing in file: {missing}; not in "
            f"template: {extra})"
        )
    restored = {}
    for key, value in stored.items():
        want = expected[key]
        if want is None or value is None:
            restored[key] = want if value is None else value
            continue
        value = np.asarray(value)
        if value.shape != np.shape(want) or value.dtype != np.asarray(want).dtype:
            raise TemplateMismatchError(
                f"sampler_state/{key}: file has array {value.dtype}{list(value.shape)}, template has "
                f"{np.asarray(want).dtype}{list(np.shape(want))}"
            )
        restored[key] = device_arrays.to_device(value, want) if isinstance(want, jax.Array) else value
    new = serialization.from_state_dict(template, restored)
    if getattr(new, "log_prob", None) is not None:
        chains = np.asarray(new.σ)
        log_psi = jax.jit(internals.log_psi_function(vs))(vs.variables, chains.reshape(-1, chains.shape[-1]))
        log_prob = vs.sampler.machine_pow * np.asarray(log_psi).real.reshape(chains.shape[:-1])
        new = new.replace(
            log_prob=device_arrays.to_device(log_prob.astype(np.asarray(new.log_prob).dtype), new.log_prob)
        )
    return new
