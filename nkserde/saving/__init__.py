"""A save: objects -> a state dict (the snapshot) -> a file.

Imports: errors, types/, format/, processes/.
"""
