"""A load: a file (nkserde's, or one NetKet wrote) into a template.

Imports: errors, _warnings, jax_internals, types/, format/, netket/ (its
internals), saving/ (the state dict's scalars and keys),
checkpoint_files/ (a checkpoint's file and directory).
"""
