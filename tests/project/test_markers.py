"""The cost marks follow what a test reaches (tests/markers.py), and a quick run refuses a process."""

from __future__ import annotations

import subprocess
import sys

import pytest
from markers import Reach, guard


def _launch() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _through_a_helper() -> None:
    _launch()


def _local_import() -> None:
    import multiprocessing

    multiprocessing.get_context("spawn").Process(target=print).start()


def _postgres(request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("postgres")


def _trains() -> None:
    from ablate.training.loop import run_trial

    run_trial(None)  # type: ignore[arg-type]


def _pure() -> int:
    return sum(range(3))


#: Looked up by name, so this module's tests do not reach the samples themselves.
SAMPLES = {f.__name__: f for f in (_through_a_helper, _local_import, _postgres, _trains, _pure)}


@pytest.mark.parametrize(
    ("sample", "marks"),
    [
        ("_through_a_helper", {"spawns"}),
        ("_local_import", {"spawns"}),
        ("_postgres", {"server"}),
        ("_trains", {"trains"}),
        ("_pure", set()),
    ],
)
def test_a_sample_is_marked_by_the_resource_its_code_reaches(sample: str, marks: set[str]) -> None:
    assert Reach().of(SAMPLES[sample]) == marks


def test_a_test_reaching_nothing_costly_is_quick(request: pytest.FixtureRequest) -> None:
    marks = {m.name for m in request.node.iter_markers()}
    assert "quick" in marks and "slow" not in marks


def test_the_guard_refuses_a_process_but_git(request: pytest.FixtureRequest) -> None:
    assert {m.name for m in request.node.iter_markers()} >= {"spawns", "slow"}  # this test starts processes
    with guard():
        with pytest.raises(RuntimeError, match="a quick test started"):
            subprocess.run(["true"], check=True)
        assert subprocess.run(["git", "--version"], capture_output=True, check=True).returncode == 0
    subprocess.run(["true"], check=True)  # the guard ends with the test
