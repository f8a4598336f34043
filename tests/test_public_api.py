"""What ``help()``, an IDE and docs/reference/api.md show of each public
name is what it takes: ``inspect.signature`` of every callable of
``nkserde.__all__`` is its implementation's (a class: its ``__init__``'s;
``checkpointed``: its own parameters and the options it passes on to
``Checkpoint``), never a metaclass's ``(*args, **kwargs)``."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types

import pytest

import nkserde

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


@pytest.mark.parametrize("name", [n for n in PUBLIC if n != "checkpointed"])
def test_the_signature_is_the_implementations(name):
    obj = getattr(nkserde, name)
    assert inspect.signature(obj).parameters == implementation_signature(obj).parameters


def test_checkpoint_shows_its_options_and_their_defaults():
    parameters = inspect.signature(nkserde.Checkpoint).parameters
    assert list(parameters)[0] == "directory"
    assert parameters["every"].default == 50 and parameters["keep"].default == 3
    assert parameters["async_save"].default is True and parameters["resume"].default == "auto"
    assert not any(p.kind in VAR for p in parameters.values())


def test_checkpointed_shows_the_options_it_passes_to_checkpoint():
    own = implementation_signature(nkserde.checkpointed).parameters
    assert [p.kind for p in own.values()][-1] is inspect.Parameter.VAR_KEYWORD  # **options
    shown = inspect.signature(nkserde.checkpointed).parameters
    options = {k: p for k, p in inspect.signature(nkserde.Checkpoint).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert list(shown) == [k for k, p in own.items() if p.kind not in VAR] + list(options)
    assert all(shown[k] == p for k, p in options.items())


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


# The policies Checkpoint(every=..., keep=...) takes, besides the plain forms
POLICIES = ["EveryDuration", "EverySteps", "KeepAny", "KeepLatest", "KeepMultiples", "SaveAny", "WithinBudget"]


@pytest.mark.parametrize("name", POLICIES)
def test_the_policies_are_public_in_nkserde_and_nkserde_checkpoint(name):
    assert name in nkserde.__all__ and name in nkserde.checkpoint.__all__
    assert getattr(nkserde, name) is getattr(nkserde.checkpoint, name)
