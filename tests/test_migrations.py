"""The schema comes only from the Alembic migrations: they build it from nothing,
match the models, and undo it."""

from __future__ import annotations

import warnings

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from flask_migrate import downgrade, upgrade
from helpers.stored import FAST_BCRYPT
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from tweepy import create_app
from tweepy.extensions import db

TABLES = {"users", "tweets", "follows", "cache_invalidations", "throttle_events"}
INDEXES = {
    "uq_users_name_lower": "users",  # names unique whatever their case
    "ix_tweets_author_id_id": "tweets",  # profiles and timelines, newest first
    "ix_follows_followed_id_follower_id": "follows",  # who follows X
    "ix_throttle_events_kind_subject_at": "throttle_events",  # recent failures of one account or address
}
HEAD = "0005"
TIMELINE_INDEXES = {("ix_tweets_author_id_id", "tweets"), ("ix_follows_followed_id_follower_id", "follows")}


@pytest.fixture
def empty_app(tmp_path):
    """An app on a database file that does not exist yet: no tables at all."""
    return create_app(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
            "SECRET_KEY": "test-secret",
            "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
            "TESTING": True,
        }
    )


def schema(app) -> dict[str, set[str]]:
    """Tables and named indexes in sqlite_master, by type."""
    with app.app_context():
        rows = db.session.execute(text("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        found: dict[str, set] = {"table": set(), "index": set()}
        for kind, name, table in rows:
            found[kind].add(name if kind == "table" else (name, table))
        return found


def revision(app) -> str | None:
    with app.app_context(), db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_empty_database_has_no_tables(empty_app):
    assert schema(empty_app) == {"table": set(), "index": set()}


def test_upgrading_an_empty_database_creates_the_tables_and_indexes(empty_app):
    with empty_app.app_context():
        upgrade()
    found = schema(empty_app)
    assert found["table"] == TABLES | {"alembic_version"}
    assert found["index"] == set(INDEXES.items())
    assert revision(empty_app) == HEAD


def test_migrated_schema_matches_the_models(empty_app):
    with empty_app.app_context():
        upgrade()
        with warnings.catch_warnings():
            # SQLite cannot reflect the lower(name) index; the test above checks it exists.
            warnings.filterwarnings("ignore", message=".*expression-based index.*")
            with db.engine.connect() as connection:
                assert compare_metadata(MigrationContext.configure(connection), db.metadata) == []


def test_name_index_refuses_a_name_differing_only_in_case(empty_app):
    with empty_app.app_context():
        upgrade()
        insert = text("INSERT INTO users (name, email, password_hash, created) VALUES (:n, :e, 'x', '2024-01-01')")
        db.session.execute(insert, {"n": "alice", "e": "a@example.com"})
        with pytest.raises(IntegrityError):
            db.session.execute(insert, {"n": "ALICE", "e": "b@example.com"})
        db.session.rollback()


def test_downgrade_to_base_removes_everything_and_upgrade_works_again(empty_app):
    with empty_app.app_context():
        upgrade()
        downgrade(revision="base")
    assert schema(empty_app) == {"table": {"alembic_version"}, "index": set()}
    assert revision(empty_app) is None
    with empty_app.app_context():
        upgrade()
    assert schema(empty_app)["table"] == TABLES | {"alembic_version"}


def test_downgrading_the_timeline_indexes_keeps_everything_else(empty_app):
    with empty_app.app_context():
        upgrade()
        downgrade(revision="0002")
    assert schema(empty_app)["table"] == TABLES | {"alembic_version"}
    assert schema(empty_app)["index"] == set(INDEXES.items()) - TIMELINE_INDEXES
    assert revision(empty_app) == "0002"


def test_downgrading_sessions_and_throttling_leaves_the_first_schema(empty_app):
    with empty_app.app_context():
        upgrade()
        downgrade(revision="0001")
        columns = {row[1] for row in db.session.execute(text("PRAGMA table_info(users)"))}
    assert "session_epoch" not in columns and "name" in columns
    assert schema(empty_app)["table"] == TABLES - {"throttle_events"} | {"alembic_version"}
    assert schema(empty_app)["index"] == {("uq_users_name_lower", "users")}
    assert revision(empty_app) == "0001"


def test_upgrading_twice_changes_nothing(empty_app):
    with empty_app.app_context():
        upgrade()
        upgrade()
    assert schema(empty_app)["table"] == TABLES | {"alembic_version"}
