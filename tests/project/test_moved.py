"""Old module names of the flat layout (ablate 0.1) still import, as the very modules they moved to, for one
release (`ablate.moved`): a user's script or a pickle naming a class by its old module keeps working."""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import subprocess
import sys

import pytest

from ablate.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_is_the_module_it_moved_to_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_no_old_name_shadows_a_module_that_exists() -> None:
    """Every target exists and no old name is also a real module (the finder comes first, so an old name that
    was still a module would be hidden by its alias)."""
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        assert importlib.util.find_spec(old).loader.__class__.__name__ == "_Alias", old


def test_a_pickle_naming_a_class_by_its_old_module_loads_in_a_fresh_process() -> None:
    """Bytes pickled by ablate 0.1 name `ablate.messages.Divergence`: a new process that has imported nothing of
    ablate unpickles them (the import of `ablate` installs the finder) as today's class."""
    from ablate.training.messages import Divergence

    data = pickle.dumps(Divergence(epoch=2, step=7), protocol=0)  # text opcodes: a name can be replaced
    data = data.replace(b"ablate.training.messages", b"ablate.messages")
    assert b"ablate.messages" in data
    code = (
        "import pickle, sys, warnings; warnings.simplefilter('ignore'); "
        "o = pickle.loads(sys.stdin.buffer.read()); print(type(o).__module__, type(o).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["ablate.training.messages", "Divergence"]
