"""The invalidation log (``cache_invalidations``): the keys each write made stale, by id, which every
``LocalCache`` replays. Here: logging a write's keys, a change and its keys in one statement, reading
what came after an id, and pruning.

A replay by id misses nothing only if ids commit in order. SQLite's single writer guarantees it; on
PostgreSQL two writers could commit out of order, and a process that read the log in between would
skip the earlier id for good, so writers of the log take turns on an advisory lock.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Row, bindparam, delete, func, insert, select, text
from sqlalchemy.sql import Executable

from ..extensions import db
from ..models import CacheInvalidation, utcnow

# Entries are kept this long; a process that has not replayed the log for half of it may have
# missed some, and drops its whole cache instead.
LOG_RETENTION = timedelta(minutes=10)
# Writes prune the log about once every this many entries.
PRUNE_EVERY = 500
# The PostgreSQL advisory lock that writers of the log take in turn.
LOG_WRITERS_LOCK = 7170637
# Built once on the table, as writes.py's statements are: every write sends one of the first three,
# and every process the last after each write anywhere.
LOG = CacheInvalidation.__table__
LOG_KEYS = insert(LOG).returning(LOG.c.id)
# PostgreSQL's, in one round trip: every row joins the writers' lock, so it is taken before any id is
# drawn, and held until the transaction ends.
IN_TURN = (
    "INSERT INTO cache_invalidations (key, created) SELECT key, :created"
    " FROM pg_advisory_xact_lock(:lock), unnest(CAST(:keys AS varchar[])) AS key"
)
LOG_KEYS_IN_TURN = text(f"{IN_TURN} RETURNING id")
# The same rows, for a change that is one statement with its log entries (``change_logged``): written
# only if the change returned a row, which the CTE ``changed`` holds.
LOG_KEYS_IF_CHANGED = text(f"{IN_TURN} WHERE EXISTS (SELECT FROM changed) RETURNING id").columns(LOG.c.id).cte("logged")
LOGGED_AFTER = select(LOG.c.id, LOG.c.key).where(LOG.c.id > bindparam("applied")).order_by(LOG.c.id)


def log_keys(keys: Sequence[str]) -> list[int]:
    """Within a write's transaction: log ``keys``, in turn with other writers. Their ids, in order."""
    if db.session.get_bind().dialect.name == "postgresql":
        result = db.session.execute(LOG_KEYS_IN_TURN, _turn(keys))
    else:
        result = db.session.execute(LOG_KEYS, [{"key": key} for key in keys])
    return _pruned_now_and_then(sorted(result.scalars()))


@functools.cache
def change_logged(statement: Executable) -> Executable:
    """PostgreSQL's: ``statement`` (a change that returns the row it changed) and the log's entries for its
    keys, in one statement that commits by itself: its row, then the log ids."""
    changed = statement.cte("changed")
    ids = select(func.array_agg(LOG_KEYS_IF_CHANGED.c.id)).scalar_subquery()
    return select(changed, ids).add_cte(changed, LOG_KEYS_IF_CHANGED)


def change_and_log_keys(statement: Executable, params: dict[str, Any], keys: Sequence[str]) -> tuple | None:
    """PostgreSQL's, outside a transaction: ``statement`` and, if it changed a row, ``keys`` logged in turn,
    as one statement. The row and the ids, in order; or None."""
    found = db.session.execute(change_logged(statement), {**params, **_turn(keys)}).first()
    if found is None:
        return None
    *row, ids = found
    return tuple(row), _pruned_now_and_then(sorted(ids))


def logged_after(applied: int) -> Sequence[Row]:
    """Every entry (id, key) after ``applied``, in order: ids commit in order, so nothing below is yet to come."""
    return db.session.execute(LOGGED_AFTER, {"applied": applied}).all()


def newest_id() -> int:
    return db.session.scalar(select(func.max(LOG.c.id))) or 0


def _turn(keys: Sequence[str]) -> dict[str, Any]:
    """The parameters of ``IN_TURN``: the writers' lock and these keys, logged now."""
    return {"lock": LOG_WRITERS_LOCK, "keys": list(keys), "created": utcnow()}


def _pruned_now_and_then(ids: list[int]) -> list[int]:
    """``ids``, once the log is pruned if they cross a multiple of PRUNE_EVERY, however many they are."""
    if ids[-1] // PRUNE_EVERY != (ids[0] - 1) // PRUNE_EVERY:
        prune_log()
    return ids


def prune_log() -> None:
    """Drop log entries nobody can still need (called now and then by writes)."""
    db.session.execute(delete(LOG).where(LOG.c.created < utcnow() - LOG_RETENTION))
