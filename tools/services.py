"""What a stage on PostgreSQL and Redis needs before it starts: servers that answer, its
database, and a connection budget the database server can honour.

A stopped local server is started (``scripts/services``, with the machine's own commands);
one that cannot be reached is one clear line saying what to install or point at.

The connection budget: every app process keeps a pool of ``DB_POOL_SIZE``
connections and may open ``DB_POOL_OVERFLOW`` more, so all nodes together may
hold ``nodes x processes x (pool + overflow)``. That must stay below the
server's ``max_connections`` less ``RESERVED`` (migrations, seeding, an
operator's psql); the stage refuses to start otherwise, saying by how much.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
RESERVED = 10
LOCAL = {"127.0.0.1", "localhost", "::1", None}


def _libpq(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def _connect(url: str, database: str | None = None):
    import psycopg

    return psycopg.connect(_libpq(url, database), autocommit=True, connect_timeout=5)


def reachable(url: str) -> bool:
    try:
        with _connect(url, "postgres"):
            return True
    except Exception:
        return False


def _ensure(service: str, url: str, answers, remedy: str) -> None:
    """``service`` answering at ``url``: a stopped local one is started; anything else is one clear line."""
    if answers(url):
        return
    if make_url(url).host in LOCAL and (ROOT / "scripts" / "services").exists():
        subprocess.run([str(ROOT / "scripts" / "services")], check=False)
        if answers(url):
            return
    raise SystemExit(f"{service} at {make_url(url).render_as_string(hide_password=True)} does not answer: {remedy}")


def ensure_server(url: str) -> None:
    _ensure(
        "PostgreSQL", url, reachable,
        "install it (apt-get install postgresql) or point TWEEPY_DATABASE_URL at a running server",
    )  # fmt: skip


def ensure_database(url: str) -> None:
    """The stage's database exists (created empty when missing); the migrations and the seed do the rest."""
    from psycopg import sql

    ensure_server(url)
    name = make_url(url).database
    with _connect(url, "postgres") as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def budget(max_connections: int, processes: int, per_process: int) -> tuple[bool, str]:
    """Whether the app's pools fit the server, and the sum that says so."""
    needed = processes * per_process
    room = max_connections - RESERVED
    line = (
        f"{processes} app processes x {per_process} connections = {needed}, "
        f"the server allows {max_connections} less {RESERVED} reserved = {room}"
    )
    return needed <= room, line


def check_connection_budget(url: str, processes: int, per_process: int) -> None:
    with _connect(url) as connection:
        max_connections = int(connection.execute("SHOW max_connections").fetchone()[0])
    fits, line = budget(max_connections, processes, per_process)
    if not fits:
        raise SystemExit(f"too many database connections: {line}; lower TWEEPY_DB_POOL_SIZE or the processes")
    print(f"==> connection budget: {line}")


def recreate_database(url: str, name: str) -> str:
    """An empty database ``name`` on the server of ``url`` (dropped first if it exists); its URL."""
    from psycopg import sql

    ensure_server(url)
    with _connect(url, "postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def postmaster_pid(url: str) -> int:
    """The server's main process, whose children serve every connection (for measuring its CPU)."""
    with _connect(url, "postgres") as connection:
        data_directory = connection.execute("SHOW data_directory").fetchone()[0]
    return int((Path(data_directory) / "postmaster.pid").read_text().split()[0])


def redis_reachable(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


def ensure_redis(url: str) -> None:
    _ensure("Redis", url, redis_reachable, "install it (apt-get install redis-server) or set TWEEPY_CACHE_URL")


def redis_pid(url: str) -> int:
    """The Redis server's process (for measuring its CPU)."""
    import redis

    return int(redis.Redis.from_url(url).info("server")["process_id"])
