"""The ``nkserde`` command line (``main``) and what only it uses: comparing
two files (``compare``, for ``nkserde diff``) and listing a checkpoint
directory (``listing``, for ``nkserde ls``)."""

from .commands import main

__all__ = ["main"]
