"""``nkserde.open``: a file opened for analysis, without a template: its
entries read as they are asked for."""

from __future__ import annotations

from pathlib import Path

from .. import format as fileformat
from ..checkpoint_files import content as checkpoint_file, directory
from ..errors import NkserdeError
from . import file_info, partial_load


class OpenFile:
    """A file opened for analysis by :func:`open`: reads what is asked for."""

    def __init__(self, path):
        path = Path(path)
        if path.is_dir():
            path = directory.newest_verified(path)
        self.path = path
        self._lazy = fileformat.LazyFile(path)

    @property
    def info(self) -> dict:
        """What :func:`info` returns."""
        return file_info.header_info(self._lazy.header)

    @property
    def tree(self):
        """The stored tree: nested dicts and lists, scalars, and
        ``LazyArray`` placeholders (``.shape``, ``.dtype``, ``.read()``)."""
        return self._lazy.tree

    def keys(self) -> list[str]:
        """The paths of every stored value (arrays and scalars)."""
        out = []

        def walk(node, path):
            names = partial_load.children(node)
            if not names or isinstance(node, fileformat.LazyArray):
                out.append(partial_load.format_path(path))
            for name in names:
                walk(node[int(name)] if isinstance(node, list) else node[name], path + (name,))

        walk(self._lazy.tree, ())
        return out

    def _at(self, path):
        state = self._lazy.tree
        parts = partial_load.split(path)
        if checkpoint_file.is_checkpoint(state) and parts and parts[0] not in state:
            parts = (checkpoint_file.DRIVER,) + parts
        return partial_load.select(state, parts, self.path)[0]

    def __contains__(self, path) -> bool:
        try:
            self._at(path)
        except NkserdeError:
            return False
        return True

    def __getitem__(self, path):
        """The value stored at ``path``, reading only its bytes: an array as
        a read-only ``np.memmap`` where it is stored raw in one block
        (nothing read until used; not checksum-verified, see :meth:`read`),
        else a numpy array read and verified; a subtree as nested dicts."""

        def get(node):
            if isinstance(node, fileformat.LazyArray):
                return node.memmap()
            if isinstance(node, dict):
                return {k: get(v) for k, v in node.items()}
            if isinstance(node, list):
                return [get(v) for v in node]
            return fileformat.materialize(node)

        return get(self._at(path))

    def read(self, path):
        """The value at ``path`` as verified numpy arrays (checksums checked)."""
        return fileformat.materialize(self._at(path))

    def close(self) -> None:
        self._lazy.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_file(path) -> OpenFile:
    """Opens a file (a Checkpoint's file or directory: its newest good
    checkpoint) for analysis without a template::

        with nkserde.open("run.nks") as f:
            kernel = f["state/parameters/Dense/kernel"]   # reads this entry only
            f.keys(); f.tree; f.info

    Paths are the ones :func:`load`'s ``at=`` takes (in a Checkpoint's file,
    paths inside its driver). The header is read and validated at once;
    an array only when asked for."""
    return OpenFile(path)
