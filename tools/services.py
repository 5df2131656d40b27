"""What a stage on PostgreSQL and Redis needs before it starts: servers that answer, its
database owned by the app's own role, and a connection budget the server can honour.

A stopped local server is started (``scripts/services``, with the machine's own commands);
one that cannot be reached is one clear line saying what to install or point at.

The connection budget: every app process keeps a pool of ``DB_POOL_SIZE``
connections and may open ``DB_POOL_OVERFLOW`` more, so all nodes together may
hold ``nodes x processes x (pool + overflow)``. That must stay below the
server's ``max_connections`` less ``RESERVED`` (migrations, seeding, an
operator's psql); the stage refuses to start otherwise, saying by how much.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
RESERVED = 10
LOCAL = {"127.0.0.1", "localhost", "::1", None}
# The role that makes databases and roles: on a local server, the one the package installs.
ADMIN = "postgres"


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
        with _connect(_as_admin(url), "postgres"):
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


def _as_admin(url: str) -> str:
    return make_url(url).set(username=ADMIN, password=None).render_as_string(hide_password=False)


def ensure_role(url: str, passfile: Path) -> None:
    """The URL's role exists, may log in and is no superuser, with a password kept in ``passfile``.

    ``passfile`` is in libpq's format and only its owner may read it: the app's processes
    get it as ``PGPASSFILE``, so the password is in neither the URL nor the code. A role
    the URL names without a kept password is given a fresh one.
    """
    from psycopg import sql

    parsed = make_url(url)
    role = parsed.username
    if role in (None, ADMIN):
        return
    # Any port: the bench's network-delay relays stand in for the server on ports of their own.
    entry = f"{parsed.host or 'localhost'}:*:*:{role}:"
    kept = [line for line in passfile.read_text().splitlines() if line.startswith(entry)] if passfile.exists() else []
    password = kept[0].removeprefix(entry) if kept else secrets.token_urlsafe(32)
    with _connect(_as_admin(url), "postgres") as admin:
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
        # scram-sha-256 is PostgreSQL's default password_encryption; say so for older servers' sake.
        admin.execute("SET password_encryption = 'scram-sha-256'")
        verb = "ALTER" if exists else "CREATE"
        admin.execute(
            sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    if not kept:
        passfile.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "a") as file:
            file.write(f"{entry}{password}\n")


def _hand_to(url: str, role: str) -> None:
    """The URL's database and everything in its public schema belong to ``role``."""
    from psycopg import sql

    name = make_url(url).database
    with _connect(_as_admin(url), "postgres") as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(role)))
    with _connect(_as_admin(url), name) as inside:
        owned = inside.execute(
            "SELECT c.relname, CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S', 'v')"
            " AND pg_get_userbyid(c.relowner) <> %s",
            (role,),
        ).fetchall()
        for relation, kind in owned:
            inside.execute(
                sql.SQL("ALTER " + kind + " {} OWNER TO {}").format(sql.Identifier(relation), sql.Identifier(role))
            )


def ensure_database(url: str, passfile: Path) -> None:
    """The stage's database exists (created empty when missing) and is owned by the URL's role,
    made with ``ensure_role`` when it is not the admin; the migrations and the seed do the rest."""
    from psycopg import sql

    ensure_server(url)
    role = make_url(url).username or ADMIN
    ensure_role(url, passfile)
    name = make_url(url).database
    with _connect(_as_admin(url), "postgres") as admin:
        missing = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        if missing:
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(role)))
    if not missing and role != ADMIN:
        _hand_to(url, role)


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
    with _connect(_as_admin(url)) as connection:
        max_connections = int(connection.execute("SHOW max_connections").fetchone()[0])
    fits, line = budget(max_connections, processes, per_process)
    if not fits:
        raise SystemExit(f"too many database connections: {line}; lower TWEEPY_DB_POOL_SIZE or the processes")
    print(f"==> connection budget: {line}")


def recreate_database(url: str, name: str, passfile: Path) -> str:
    """An empty database ``name`` on the server of ``url`` (dropped first if it exists), owned
    by the URL's role; its URL."""
    from psycopg import sql

    ensure_server(url)
    role = make_url(url).username or ADMIN
    ensure_role(url, passfile)
    with _connect(_as_admin(url), "postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(role)))
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def postmaster_pid(url: str) -> int:
    """The server's main process, whose children serve every connection (for measuring its CPU)."""
    with _connect(_as_admin(url), "postgres") as connection:
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
