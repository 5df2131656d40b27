"""How connections to the database are set up: the one place with SQLite-only code.

Always, on SQLite: foreign keys enforced and a busy timeout, so a writer waits
for another instead of failing with "database is locked". With
``SQLITE_TUNED``: the write-ahead log, so readers never wait for
writers; ``synchronous=NORMAL``, which in WAL mode still never corrupts and
loses at most the last transactions on power loss, not on a process crash;
a bigger page cache, memory-mapped reads and in-memory temporary tables.

On PostgreSQL, a pooled connection is checked for a server that ended it while
it sat idle (a restart says so and closes the socket) by looking at its socket,
not by a round trip before every request. With ``DB_READS_AUTOCOMMIT``,
connections are in autocommit, so a read is one round trip, not BEGIN, the read
and ROLLBACK; whatever writes begins its own transaction (``begin_writing``).
"""

from __future__ import annotations

import select
from typing import Any

from flask import Flask, current_app
from gevent.monkey import get_original
from sqlalchemy import event, exc, text
from sqlalchemy.engine import Connection, Engine, make_url

from .extensions import db

BEGIN = text("BEGIN")


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def reads_autocommit(config: dict[str, Any]) -> bool:
    return bool(config["DB_READS_AUTOCOMMIT"]) and not is_sqlite(config["DATABASE_URL"])


def engine_options(config: dict[str, Any]) -> dict[str, Any]:
    """Pool settings: a bounded pool per process, so concurrency cannot exhaust the database."""
    options = {
        "pool_size": config["DB_POOL_SIZE"],
        "max_overflow": config["DB_POOL_OVERFLOW"],
        "pool_timeout": config["DB_POOL_TIMEOUT"],
    }
    if reads_autocommit(config):
        options["isolation_level"] = "AUTOCOMMIT"
    return options


def begin_writing() -> None:
    """Open a real transaction on the app's session where reads autocommit; the session's commit or
    rollback ends it (psycopg sends COMMIT or ROLLBACK whenever the server is in a transaction)."""
    if reads_autocommit(current_app.config):
        db.session.execute(BEGIN)


def transactional(connection: Connection) -> Connection:
    """``connection`` in PostgreSQL's default READ COMMITTED, for work that must be all or nothing (migrations)."""
    if connection.dialect.name == "postgresql":
        return connection.execution_options(isolation_level="READ COMMITTED")
    return connection


def pragmas(config: dict[str, Any]) -> list[str]:
    statements = ["PRAGMA foreign_keys=ON", f"PRAGMA busy_timeout={int(config['SQLITE_BUSY_TIMEOUT_MS'])}"]
    if config["SQLITE_TUNED"]:
        statements += [
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=NORMAL",
            f"PRAGMA cache_size=-{int(config['SQLITE_CACHE_MB']) * 1024}",
            f"PRAGMA mmap_size={int(config['SQLITE_MMAP_MB']) * 1024 * 1024}",
            "PRAGMA temp_store=MEMORY",
        ]
    return statements


# gevent's monkey-patching makes select.poll wait on its hub; a zero timeout never waits, so the original serves.
_poll = get_original("select", "poll")


def ended_by_the_server(dbapi_connection: Any) -> bool:
    """Whether the server spoke on a connection idle in the pool: nothing is owed to it there, so
    anything readable is the last error of a server that ended it (a restart, a terminated backend)
    or the end of the stream. One system call, where a ping is a round trip."""
    connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if connection.closed or connection.broken:
        return True
    poller = _poll()
    poller.register(connection.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def init_app(app: Flask, engine: Engine) -> None:
    if not is_sqlite(app.config["DATABASE_URL"]):

        @event.listens_for(engine, "checkout")
        def check(dbapi_connection, _record, _proxy) -> None:
            if ended_by_the_server(dbapi_connection):
                # The pool discards it and checks out another, connecting afresh if need be.
                raise exc.DisconnectionError("the server ended this connection while it sat in the pool")

        return
    statements = pragmas(app.config)

    @event.listens_for(engine, "connect")
    def tune(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        for statement in statements:
            cursor.execute(statement)
        cursor.close()
