"""``flask --app tweepy seed``: deterministic benchmark data, fast; ``schema``: the stage's revision;
``explain``: how the database runs each read the pages make."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import click
from flask import Flask, current_app
from flask.cli import with_appcontext
from sqlalchemy import Connection, event, func, insert, select, text

from . import config, queries
from .db_tuning import begin_writing
from .extensions import bcrypt, db
from .models import Follow, Tweet, User

SEED_PASSWORD = "tweepy123"
BATCH = 20_000
WORDS = (
    "scaling python flask sqlite nginx uwsgi gevent cache locust queue latency throughput "
    "index page timeline follow tweet server worker process thread greenlet request response "
    "database write read memory disk network benchmark percentile coffee lunch today again"
).split()


def _batches(rows, size=BATCH):
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _insert_rows(connection: Connection, model, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
    """Insert many rows in the current transaction, as fast as the database takes them.

    PostgreSQL: COPY, which streams the rows instead of sending a statement
    per batch; other databases: batched INSERTs.
    """
    if connection.dialect.name == "postgresql":
        from psycopg import sql

        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(model.__tablename__), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        with connection.connection.driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
        return
    for batch in _batches(rows):
        connection.execute(insert(model), [dict(zip(columns, row, strict=True)) for row in batch])


def _move_id_sequence_past_seeded_users(connection: Connection) -> None:
    """On PostgreSQL, make the next registration's id follow the seeded ones.

    The seed gives users explicit ids, which PostgreSQL's id sequence does not
    see: it would hand out 1 again, and the registration would fail on the key.
    (SQLite's AUTOINCREMENT takes the largest id in the table by itself.)
    """
    if connection.dialect.name == "postgresql":
        connection.execute(
            text(
                "SELECT setval(pg_get_serial_sequence('users', 'id'), coalesce(max(id), 1), max(id) IS NOT NULL)"
                " FROM users"
            )
        )


def _analyze_seeded_tables(connection: Connection) -> None:
    """On PostgreSQL, gather the planner's statistics for what was just loaded (in the seed's own
    transaction, whose rows ANALYZE counts).

    Until a table is analyzed its planner guesses its size and spread, and autovacuum (which may be
    off) would do it only later: the first requests after a seed would be planned on those guesses.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("ANALYZE users, tweets, follows"))


@click.command("seed")
@with_appcontext
@click.option("--users", default=1000, show_default=True, help="users user1..userN")
@click.option("--tweets", default=100_000, show_default=True, help="tweets spread over the last year")
@click.option("--follows", default=20, show_default=True, help="users each user follows")
@click.option("--seed", "rng_seed", default=42, show_default=True, help="random seed: same seed, same data")
@click.option("--if-empty", is_flag=True, help="do nothing (instead of failing) when there are users already")
def seed_command(users: int, tweets: int, follows: int, rng_seed: int, if_empty: bool) -> None:
    """Fill an empty database with users who all share the password 'tweepy123'."""
    if db.session.scalar(select(func.count()).select_from(User)):
        if if_empty:
            click.echo("the database has users already: not seeding")
            return
        raise click.ClickException("the database already has users; seed an empty one (flask --app tweepy db upgrade)")
    if follows >= users and users:
        raise click.ClickException("--follows must be smaller than --users")
    started = time.perf_counter()
    rng = random.Random(rng_seed)
    cost = current_app.config["BCRYPT_LOG_ROUNDS"]
    # One hash for everyone: bcrypt is slow on purpose, and a hash per seeded user would dwarf the rest.
    password_hash = bcrypt.generate_password_hash(SEED_PASSWORD, cost).decode()
    now = datetime.utcnow().replace(microsecond=0)
    year_ago = now - timedelta(days=365)

    begin_writing()  # all or nothing, even where reads autocommit
    connection = db.session.connection()
    _insert_rows(
        connection,
        User,
        ("id", "name", "email", "password_hash", "created"),
        ((i, f"user{i}", f"user{i}@example.com", password_hash, year_ago) for i in range(1, users + 1)),
    )

    step = timedelta(days=365) / max(tweets, 1)
    # Posted times grow with ids, so "newest first" by id is also by time.
    _insert_rows(
        connection,
        Tweet,
        ("author_id", "text", "posted"),
        (
            (rng.randint(1, users), " ".join(rng.choices(WORDS, k=rng.randint(3, 16))), year_ago + step * i)
            for i in range(tweets)
        ),
    )

    def follow_rows():
        for follower in range(1, users + 1):
            for followed in rng.sample(range(1, users), follows):
                # Shift past oneself: a sample of the others, without a retry loop.
                yield follower, followed + (followed >= follower)

    _insert_rows(connection, Follow, ("follower_id", "followed_id"), follow_rows())
    _move_id_sequence_past_seeded_users(connection)
    _analyze_seeded_tables(connection)
    db.session.commit()
    click.echo(
        f"seeded {users} users, {tweets} tweets, {follows} follows each "
        f"(password {SEED_PASSWORD!r}, bcrypt cost {cost}) in {time.perf_counter() - started:.1f}s"
    )


@click.command("schema")
@with_appcontext
@click.argument("revision")
def schema_command(revision: str) -> None:
    """Move the schema to REVISION ('head', '0002'...), upgrading or downgrading as needed.

    The stages before the database step run at 0002, before the timeline indexes.
    """
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from flask_migrate import downgrade, upgrade

    scripts = ScriptDirectory.from_config(current_app.extensions["migrate"].migrate.get_config())
    target = scripts.get_revision(revision).revision
    with db.engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    # The history is a straight line: compare places in it, oldest first.
    order = [r.revision for r in reversed(list(scripts.walk_revisions()))]
    if current is None or order.index(target) > order.index(current):
        upgrade(revision=target)
    elif current != target:
        downgrade(revision=target)
    click.echo(f"schema at {target}")


class Statement(NamedTuple):
    sql: str
    parameters: Any
    plan: str


def query_plans(read: Callable[..., Any], *args: Any) -> list[Statement]:
    """Every statement ``read(*args)`` sends, with the plan the database chose for it."""
    sent = []

    def capture(_conn, _cursor, sql, parameters, _context, _executemany):
        sent.append((sql, parameters))

    event.listen(db.engine, "before_cursor_execute", capture)
    try:
        read(*args)
    finally:
        event.remove(db.engine, "before_cursor_execute", capture)
    return [Statement(sql, parameters, _plan(sql, parameters)) for sql, parameters in sent]


def _plan(sql: str, parameters: Any) -> str:
    connection = db.session.connection().connection.driver_connection
    if db.engine.dialect.name == "sqlite":
        return " / ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, parameters))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, parameters)
        return " / ".join(row[0].strip() for row in cursor)


def _median_ms(statement: Statement, runs: int = 5) -> float:
    """How long the statement takes, fetched to the last row (the median of a few runs: the first warms the cache)."""
    connection = db.session.connection().connection.driver_connection
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        cursor = connection.cursor()
        cursor.execute(statement.sql, statement.parameters)
        cursor.fetchall()
        cursor.close()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


@click.command("explain")
@with_appcontext
@click.option("--user", "user_id", default=1, show_default=True, help="whose timeline and profile to explain")
def explain_command(user_id: int) -> None:
    """How the database runs each read the pages make, with the app's settings: every statement it
    sends, the plan the database chose (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL), its time."""
    revision = db.session.scalar(text("SELECT version_num FROM alembic_version"))
    click.echo(f"{config.loggable_url(current_app.config['DATABASE_URL'])}, schema at {revision}")
    with current_app.test_request_context():
        # Each read once, in this order, so that with a cache on each still goes to the database
        # (a timeline's page merged from author pages then shows the author pages alone).
        follows_plans = query_plans(queries.following_of, user_id)
        timeline_plans = query_plans(queries.timeline_of, user_id)
        first_page = queries.timeline_of(user_id)
        older = first_page[-1].id if first_page else None
        reads = [
            ("whom a user follows", queries.following_of, (user_id,), follows_plans),
            ("a timeline's first page", queries.timeline_of, (user_id,), timeline_plans),
            ("an older timeline page (?before=)", queries.timeline_of, (user_id, older), None),
            ("an older profile page (?before=)", queries.tweets_by, (user_id, older), None),
            ("a page of the users list", queries.users_page, (3,), None),
        ]
        for title, read, args, statements in reads:
            statements = statements if statements is not None else query_plans(read, *args)
            click.echo(f"\n{title}: {read.__name__}{args}, {len(statements)} statement(s)")
            # A timeline merged from author pages sends one same statement per author: shown once.
            shown: dict[str, list[Statement]] = {}
            for statement in statements:
                shown.setdefault(statement.sql, []).append(statement)
            for sql, alike in shown.items():
                times = [_median_ms(s) for s in alike]
                each = f"{len(alike)} x, {statistics.median(times):.2f} ms each" if len(alike) > 1 else ""
                click.echo(f"  {' '.join(sql.split())}")
                click.echo(f"    plan: {alike[0].plan}")
                click.echo(f"    time: {each or f'{times[0]:.2f} ms'}")


def init_app(app: Flask) -> None:
    app.cli.add_command(seed_command)
    app.cli.add_command(schema_command)
    app.cli.add_command(explain_command)
