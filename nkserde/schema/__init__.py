"""The schema over releases: every registration's fields and versions
recorded (manifest.py; ``python -m nkserde.schema``), today's versions for
readers that import no NetKet (versions.json), and a file rewritten at
today's versions (migrate.py: ``nkserde.migrate``).

Imports: errors, types/, format/, netket/ (the registrations), saving/,
loading/, checkpoint_files/ (a checkpoint's file).
"""
