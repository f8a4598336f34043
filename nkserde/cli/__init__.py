"""The ``nkserde`` command line (``main``) and what only it uses: comparing
two files (``compare``, for ``nkserde diff``) and listing a checkpoint
directory (``listing``, for ``nkserde ls``).

Imports: errors, types/, format/, netket/ (the registrations a migration
needs), checkpoint_files/, loading/, schema/, checkpoint/ (the history
logs of a checkpoint directory).
"""

from .commands import main

__all__ = ["main"]
