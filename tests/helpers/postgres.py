"""PostgreSQL databases for tests: each new, under a name of its own, and dropped
afterwards whatever happened, so tests never share data nor touch the server's
other databases."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from .services import libpq_url, postgres_url


@contextmanager
def fresh_database(purpose: str = "test") -> Iterator[str]:
    """Create an empty database and yield its SQLAlchemy URL; drop it on the way out."""
    server = postgres_url()
    name = f"tweepy_{purpose}_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_url(server), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq_url(server), autocommit=True) as admin:
            # FORCE: a pool a failed test left open must not keep the database alive.
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
