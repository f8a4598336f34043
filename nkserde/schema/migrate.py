"""Rewriting a file at the current file format and schema versions.

:func:`nkserde.load` upgrades old files in memory and never touches them;
:func:`migrate` writes the upgraded file, for users who want their archive
at today's versions (an old nkserde reading it is then refused, so it
never replaces the original unless asked).
"""

from __future__ import annotations

from pathlib import Path

from .. import netket as _registrations  # noqa: F401  (today's versions of NetKet's types)
from ..loading import file_info
from ..loading.load import load, written_by
from ..saving.line import new_meta
from ..saving.snapshot import to_state_dict
from ..types import migrations, registry
from ..checkpoint_files import content as checkpoint_file
from .. import format as fileformat
from ..errors import CorruptFileError, MigrationError, NkserdeError, UnsupportedVersionError, format_path, in_file
from ..types.placement import ProcessValues
from ..format import tree_codec
from ..format.tree_codec import TYPE, VERSION


def migrate(src, dst=None, *, template=None, overwrite: bool = False) -> Path:
    """Writes ``src`` again at the current file format and schema versions,
    atomically, and returns the path written.

    Args:
      src: an nkserde file.
      dst: where to write; default: beside ``src``, named
        ``<stem>.migrated<suffix>``. ``src`` itself only with ``overwrite``.
      template: needed only by migrations that use the loaded object (a
        Metropolis sampler state of schema version 1 without ``log_prob``
        needs the model): the file is then loaded into it and saved again,
        so the configuration fields a state records (``n_samples``...) are
        the template's.
      overwrite: replace ``src`` (atomically).

    Without a template the stored values are upgraded as stored: nothing is
    built, per-process values of every saved process are kept. A file
    written by a newer nkserde raises UnsupportedVersionError naming the
    type, both versions and the nkserde that wrote it.
    """
    src = Path(src)
    if dst is None:
        dst = src if overwrite else file_info.migrated_path(src)
    dst = Path(dst)
    if dst.resolve() == src.resolve() and not overwrite:
        raise NkserdeError(f"{src}: migrate would overwrite the original; pass overwrite=True")
    header, state = fileformat.read_file(src)
    old_meta = header.get("meta", {})
    if (
        template is not None
        and checkpoint_file.is_checkpoint(state)
        and not checkpoint_file.is_checkpoint_template(template)
    ):
        # a Checkpoint file: the driver through the template, the rest as stored
        driver = to_state_dict(load(template, src))
        state = {**state, checkpoint_file.DRIVER: driver}
    elif template is not None:  # load names the file in its errors
        state = to_state_dict(load(template, src))
    try:
        state = _upgrade(state, ())
    except MigrationError as exc:
        raise needs_template(src, exc, old_meta) from None
    except UnsupportedVersionError as exc:
        raise in_file(exc, src, written_by(old_meta)) from None
    except NkserdeError as exc:
        raise in_file(exc, src) from None
    meta = {
        **new_meta(state, old_meta.get("root_type", "dict")),
        "process_count": old_meta.get("process_count", 1),
        "migrated_from": {
            "format_version": header.get("format_version"),
            **{k: old_meta.get(k) for k in ("nkserde", "netket", "created")},
        },
    }
    return fileformat.drain(fileformat.write_file_steps(dst, state, meta))


def needs_template(path, exc: MigrationError, meta) -> MigrationError:
    """A migration that needs the loaded object, met without a template:
    the error, and how to give one."""
    return MigrationError(
        f"{path}: {exc}{written_by(meta)}; migrate the file with a template built as the saved object "
        f'was: nkserde.migrate("{path}", template=build_driver()), or on the command line nkserde migrate '
        f"{path} --template your_script.py:build_driver (a function of your script that builds it)"
    )


def current_state_dict(path, *, kept: list | None = None) -> object:
    """The file's state dict (as :func:`nkserde.load_state_dict` returns
    it) with every stored object at today's name and schema version, in
    memory: files of other format or schema versions compare with today's.

    ``kept``: if given, an object whose migration needs a template (see
    :func:`migrate`) stays at its stored version instead of raising, and
    ``(path, type name, stored version)`` is appended to it."""
    path = Path(path)
    header, state = fileformat.read_file(path)
    try:
        return _upgrade(state, (), kept)
    except MigrationError as exc:
        raise needs_template(path, exc, header.get("meta")) from None
    except UnsupportedVersionError as exc:
        raise in_file(exc, path, written_by(header.get("meta"))) from None
    except NkserdeError as exc:
        raise in_file(exc, path) from None


def _upgrade(node, path, kept=None):
    """The file's tree with every registered object at its current schema
    version (migrations get no template). ``kept``: see
    :func:`current_state_dict`."""
    if isinstance(node, ProcessValues):
        return ProcessValues([_upgrade(v, path, kept) for v in node.values])
    if isinstance(node, list):
        return [_upgrade(v, path + (i,), kept) for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if TYPE not in node:
        return {k: _upgrade(v, path + (k,), kept) for k, v in node.items()}
    if not isinstance(node[TYPE], str):
        raise CorruptFileError(f"{format_path(path)}: malformed type name {node[TYPE]!r:.80}")
    name = registry.resolve(node[TYPE])
    reg, version = registry.lookup_name(name), node.get(VERSION)
    fields = tree_codec.fields_of(node)
    if reg is not None and isinstance(version, int) and not isinstance(version, bool):
        try:
            fields = migrations.upgrade(name, version, fields, reg.version, path)
            version = reg.version
        except MigrationError:
            if kept is None:
                raise
            kept.append((path, name, version))
    # a type this install does not know (a rule-made one not met yet: its
    # schema is its library's, version 1) is kept as it is
    return {TYPE: name, VERSION: version, **{k: _upgrade(v, path + (k,), kept) for k, v in fields.items()}}
