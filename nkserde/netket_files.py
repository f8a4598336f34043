"""Files NetKet itself writes, loaded into nkserde templates.

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
read, with flax's msgpack decoder: ``object.json`` names classes to import
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
import json
import zipfile
from pathlib import Path

import jax
import netket as nk
import numpy as np

from . import tree
from .errors import CorruptFileError, TemplateMismatchError, format_path

_ZIP = b"PK\x03\x04"
_STATE_MEMBERS = ("assets//state.msgpack", "assets/state.msgpack", "state/state.msgpack")


def kind(path) -> str | None:
    """``"nqxpack"``, ``"mpack"`` (flax msgpack) or None, from the first
    bytes of the file."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == _ZIP:
        return "nqxpack"
    if head and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF)):
        return "mpack"
    return None


def load(template, path):
    """``template`` with what the NetKet file at ``path`` holds (see the
    module docstring)."""
    path = Path(path)
    state = _read(path)
    if not isinstance(state, dict):
        raise CorruptFileError(f"{path}: a NetKet file holds a map, not {type(state).__name__}")
    variables = state["variables"] if "variables" in state else state
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


def _read(path: Path):
    from flax import serialization

    data = path.read_bytes()
    if data[:4] == _ZIP:
        try:
            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
                meta = json.loads(z.read("metadata.json")) if "metadata.json" in names else {}
                if meta.get("format") != "NetKet":
                    raise CorruptFileError(f"{path}: a zip file that is not a NetKet (nqxpack) file")
                member = next((m for m in _STATE_MEMBERS if m in names), None)
                if member is None:
                    raise CorruptFileError(f"{path}: nqxpack file without a state member (has {sorted(names)[:6]})")
                data = z.read(member)
        except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
            raise CorruptFileError(f"{path}: unreadable nqxpack file: {exc}") from None
    try:
        return serialization.msgpack_restore(data)
    except Exception as exc:  # msgpack's errors, flax's ext decoding
        raise CorruptFileError(f"{path}: not a readable flax msgpack file: {type(exc).__name__}: {exc}") from None


def _variables(template_variables, file_variables):
    """The file's variables in the template's structure, dtypes and
    shardings (mismatches name their path)."""
    template_variables = dict(template_variables)
    file_variables = _lists(file_variables, template_variables)
    return tree.from_state_dict(template_variables, _np(file_variables), ("variables",))


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
        if name in state and state[name] != getattr(template, name):
            setattr(new, name, state[name])
    if "sampler_state" in state:
        sampler_state = _sampler_state(new, state["sampler_state"])
        new.sampler_state = sampler_state
        new._sampler_state_previous = sampler_state
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
        restored[key] = tree.to_device(value, want) if isinstance(want, jax.Array) else value
    new = serialization.from_state_dict(template, restored)
    if getattr(new, "log_prob", None) is not None:
        chains = np.asarray(new.σ)
        log_psi = jax.jit(vs._apply_fun)(vs.variables, chains.reshape(-1, chains.shape[-1]))
        log_prob = vs.sampler.machine_pow * np.asarray(log_psi).real.reshape(chains.shape[:-1])
        new = new.replace(log_prob=tree.to_device(log_prob.astype(np.asarray(new.log_prob).dtype), new.log_prob))
    return new
