"""Opening a results database: the schema check that skips alembic where the database is up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.store import Store, engine

pytestmark = pytest.mark.quick


def test_the_head_read_from_the_migration_files_is_alembics(tmp_path: Path) -> None:
    """`engine.head` (file names) names the migration alembic calls head: a new migration file is the new head."""
    assert engine.head() == engine.revision_number("head")


def test_a_database_behind_the_newest_schema_is_still_migrated(tmp_path: Path) -> None:
    """The cheap check says 'up to date' only at the head: a database at an older revision is upgraded, and one
    without a version table is created whole."""
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    made = engine.make_engine(url)
    assert not engine.at(made, engine.head())  # no tables yet
    older = str(int(engine.head()) - 1).zfill(4)
    engine.upgrade(made, older)
    assert engine.at(made, older) and not engine.at(made, engine.head())
    with Store(url):
        pass
    assert engine.at(made, engine.head())
    made.dispose()
