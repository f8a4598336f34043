"""What a state dict is made of: nested dicts and lists (nested.py), values
laid out over a run's processes (placement.py), and objects of registered
types at a schema version: the registry, the upgrades of old versions, the
registrations nkserde brings itself (registry.py, migrations.py,
builtin_types.py).

Imports: errors (nothing else of nkserde).
"""
