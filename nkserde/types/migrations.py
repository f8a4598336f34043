"""Migrations: the upgrade of a stored object's fields from an old schema
version to the current one, one registered step at a time
(``nkserde.migration`` registers the steps in the registry's table), and
the :class:`MigrationContext` a step receives."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from . import registry
from ..errors import MigrationError, UnsupportedVersionError, format_path


class Loading(NamedTuple):
    """An object being loaded: its template and its fields restored so far."""

    template: Any
    restored: dict


@dataclasses.dataclass(frozen=True)
class MigrationContext:
    """What a migration receives besides the stored fields.

    Attributes:
      name, from_version: the type and the version being upgraded.
      path: where in the loaded object this value sits.
      template: the object the fields will be loaded into, or None when a
        file is migrated without a template (:func:`nkserde.migrate`).
    """

    name: str
    from_version: int
    path: tuple
    template: Any
    _enclosing: tuple = ()

    def enclosing(self, cls: type) -> Loading | None:
        """The nearest enclosing object being loaded whose template is a
        ``cls``: its template and the fields already restored (fields are
        restored in the order ``to_state`` returns them), or None."""
        for loading in reversed(self._enclosing):
            if isinstance(loading.template, cls):
                return loading
        return None

    def needs(self, what: str) -> MigrationError:
        """The error a migration raises when the context lacks ``what``."""
        return MigrationError(
            f"{format_path(self.path)}: upgrading {self.name} from schema version {self.from_version} needs {what}"
        )


def upgrade(
    name: str, version: int, fields: dict, current: int, path=(), *, template=None, enclosing: tuple = ()
) -> dict:
    """Applies the migrations of ``name`` from ``version`` to ``current``;
    ``template`` is the object the fields are being loaded into (None: no
    template, as in :func:`nkserde.migrate`), ``enclosing`` the
    :class:`Loading` objects around it, outermost first (what
    :meth:`MigrationContext.enclosing` searches)."""
    if version > current:
        raise UnsupportedVersionError(
            f"{format_path(path)}: {name} has schema version {version} in the file, "
            f"newer than version {current} known to this nkserde; upgrade nkserde"
        )
    while version < current:
        step = registry.migration_step(name, version)
        if step is None:
            raise UnsupportedVersionError(
                f"{format_path(path)}: {name} schema version {version} in the file, "
                f"current is {current}, and no migration from version {version} is registered"
            )
        context = MigrationContext(name, version, tuple(path), template, tuple(enclosing))
        fields = step(dict(fields), context)
        version += 1
    return fields
