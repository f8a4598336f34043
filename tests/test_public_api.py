"""What ``help()``, an IDE and docs/reference/api.md show of each public
name is what it takes: ``inspect.signature`` of every callable of
``nkserde.__all__`` is its implementation's (a class: its ``__init__``'s;
``Checkpoint`` and ``checkpointed``: their own parameters and the options
of their one declaration, nkserde.checkpoint.options), never a
metaclass's ``(*args, **kwargs)``."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types

import pytest

import nkserde
from nkserde.checkpoint.options import CheckpointOptions

VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def implementation_signature(obj) -> inspect.Signature:
    """The parameters the code of ``obj`` declares, whatever
    ``__signature__`` says: a class's ``__init__`` without ``self``, a
    function's own code."""
    if isinstance(obj, type):
        init = obj.__init__
        code = types.FunctionType(init.__code__, init.__globals__, init.__name__, init.__defaults__, init.__closure__)
        code.__kwdefaults__, code.__annotations__ = init.__kwdefaults__, init.__annotations__
        sig = inspect.signature(code)
        return sig.replace(parameters=list(sig.parameters.values())[1:])
    code = types.FunctionType(obj.__code__, obj.__globals__, obj.__name__, obj.__defaults__, obj.__closure__)
    code.__kwdefaults__, code.__annotations__ = obj.__kwdefaults__, obj.__annotations__
    return inspect.signature(code)


PUBLIC = [name for name in nkserde.__all__ if callable(getattr(nkserde, name))]


def test_every_public_name_but_the_errors_module_is_callable():
    assert sorted(set(nkserde.__all__) - set(PUBLIC)) == ["errors"]


@pytest.mark.parametrize("name", [n for n in PUBLIC if n not in ("Checkpoint", "checkpointed")])
def test_the_signature_is_the_implementations(name):
    obj = getattr(nkserde, name)
    assert inspect.signature(obj).parameters == implementation_signature(obj).parameters


def test_checkpoint_shows_its_options_and_their_defaults():
    parameters = inspect.signature(nkserde.Checkpoint).parameters
    assert list(parameters)[0] == "directory"
    assert parameters["every"].default == 50 and parameters["keep"].default == 3
    assert parameters["async_save"].default is True and parameters["resume"].default == "auto"
    assert parameters["job"].default == nkserde.JobOptions()
    assert not any(p.kind in VAR for p in parameters.values())


@pytest.mark.parametrize("call", ["Checkpoint", "checkpointed"])
def test_checkpoint_and_checkpointed_show_the_options_they_take(call):
    own = implementation_signature(getattr(nkserde, call)).parameters
    assert [p.kind for p in own.values()][-1] is inspect.Parameter.VAR_KEYWORD  # **options
    shown = inspect.signature(getattr(nkserde, call)).parameters
    options = inspect.signature(CheckpointOptions).parameters
    assert list(shown) == [k for k, p in own.items() if p.kind not in VAR] + list(options)
    assert all(shown[k].default == p.default for k, p in options.items())


@pytest.mark.parametrize(
    "modules",
    [
        "nkserde.checkpoint_files.directory, nkserde.checkpoint_files.content",  # the checkpoint package's headers
        "nkserde.checkpoint.save_policy, nkserde.checkpoint.keep_policy",  # the policies
    ],
)
def test_the_checkpoint_packages_header_modules_import_without_netket(modules):
    code = f"import sys, {modules}\nprint(sorted(m for m in ('jax', 'netket', 'flax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# The objects Checkpoint(every=..., keep=..., job=..., init_from=...) takes, besides the plain forms
POLICIES = [
    *("EveryDuration", "EverySteps", "SaveAny", "WithinBudget"),
    *("KeepAny", "KeepLatest", "KeepMultiples"),
    *("InitFrom", "JobOptions"),
]


@pytest.mark.parametrize("name", POLICIES)
def test_the_policies_are_public_in_nkserde_and_nkserde_checkpoint(name):
    assert name in nkserde.__all__ and name in nkserde.checkpoint.__all__
    assert getattr(nkserde, name) is getattr(nkserde.checkpoint, name)
