"""Import paths of internal modules that moved, kept for code that imported
them: ``import nkserde.directory`` gives the module now at
``nkserde.checkpoint_files.directory``, the same object (patching one patches the
other). The CHANGELOG lists each move."""

from __future__ import annotations

import importlib
import importlib.util
import sys

MOVED = {
    "nkserde.directory": "nkserde.checkpoint_files.directory",
    "nkserde.checkpoint_file": "nkserde.checkpoint_files.content",
    "nkserde.coordination": "nkserde.processes.coordination",
    "nkserde.distributed": "nkserde.processes.jax_service",
}


# A finder and loader by protocol, not by importlib.abc's base classes:
# importing importlib.abc costs ~10 ms, and every ``import nkserde`` (the
# command line's included) installs this hook.
class _Moved:
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        # the module at its new path; the import system keeps its own
        # __name__ and __spec__ (it only fills in attributes that are unset)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass  # already executed under its new name


def install() -> None:
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.append(_Moved())
