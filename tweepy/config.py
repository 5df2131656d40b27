"""Every setting tweepy has, with its default, read from ``TWEEPY_*`` variables.

A stage is nothing but values for these settings (see ``stages/``), so this
module is the single list of switches the ladder can turn. A setting is read
from the environment variable of the same name with a ``TWEEPY_`` prefix
(``DATABASE_URL`` from ``TWEEPY_DATABASE_URL``); ``create_app(overrides)`` wins
over both.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str


SETTINGS: tuple[Setting, ...] = (
    # Where the data lives. Any SQLAlchemy URL; empty means a SQLite file in the instance folder.
    Setting("DATABASE_URL", "", "SQLAlchemy database URL (default: instance/tweepy.sqlite3)"),
    Setting("SECRET_KEY", "", "Signs sessions and CSRF tokens (default: generated once, kept in the instance folder)"),
    Setting("BCRYPT_LOG_ROUNDS", 12, "bcrypt cost; the benchmark reports it next to every figure"),
    Setting("BCRYPT_IN_THREADPOOL", False, "Hash in gevent's native thread pool so greenlets keep running"),
    Setting("PAGE_SIZE", 50, "Tweets or users per page"),
    Setting("MAX_CONTENT_LENGTH", 1024 * 1024, "Largest request body accepted; bigger ones get 413"),
    # SQLite tuning (stage 3); ignored for other databases.
    Setting("SQLITE_TUNED", False, "WAL, synchronous=NORMAL, cache, mmap and temp_store pragmas"),
    Setting("SQLITE_BUSY_TIMEOUT_MS", 5000, "How long a connection waits for a lock before 'database is locked'"),
    Setting("SQLITE_CACHE_MB", 64, "Page cache per connection, in MiB (tuned only)"),
    Setting("SQLITE_MMAP_MB", 256, "Memory-mapped I/O size, in MiB (tuned only)"),
    # Connection pool (stage 5): bounded, so async workers cannot exhaust the database.
    Setting("DB_POOL_SIZE", 5, "Connections kept per process"),
    Setting("DB_POOL_OVERFLOW", 0, "Extra connections a process may open under load"),
    Setting("DB_POOL_TIMEOUT", 10, "Seconds a request waits for a pooled connection"),
    # Memoized reads (stage 4).
    Setting("CACHE", "none", "Read cache: 'none' or 'local' (in-process, cross-process invalidation)"),
    Setting("CACHE_SIZE", 20000, "Entries kept per process"),
    Setting("CACHE_TTL", 300, "Seconds an entry may live even with no invalidation (a safety net)"),
    Setting("CACHE_SYNC_INTERVAL", 1.0, "Seconds between checks of other processes' writes: the staleness bound"),
    # How a stage is served (read by tools/stages.py, which starts the servers; the app ignores them).
    Setting("SERVER", "dev", "'dev' (Flask's development server) or 'uwsgi' (nginx in front of uWSGI)"),
    Setting("PROCESSES", "4", "uWSGI worker processes; 'auto' means one per core (nproc)"),
    Setting("GEVENT", 0, "gevent async cores per uWSGI process; 0 means plain synchronous workers"),
    Setting("LISTEN", 1024, "uWSGI listen queue: connections waiting for a free worker"),
    Setting("SCHEMA_REVISION", "head", "Alembic revision the stage runs at (0001 has no timeline indexes)"),
)

_BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _parse(setting: Setting, raw: str) -> Any:
    if isinstance(setting.default, bool):
        try:
            return _BOOLEAN_WORDS[raw.strip().lower()]
        except KeyError:
            raise ValueError(f"TWEEPY_{setting.name}={raw!r} is not a boolean") from None
    if isinstance(setting.default, (int, float)):
        try:
            return type(setting.default)(raw)
        except ValueError:
            raise ValueError(f"TWEEPY_{setting.name}={raw!r} is not a number") from None
    return raw


def load(instance_path: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The effective settings: defaults, then ``TWEEPY_*`` variables, then overrides."""
    overrides = dict(overrides or {})
    config: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = os.environ.get(f"TWEEPY_{setting.name}")
        config[setting.name] = setting.default if raw is None else _parse(setting, raw)
    # Overrides may also carry Flask's own keys (TESTING, WTF_CSRF_ENABLED...).
    config.update(overrides)

    if not config["DATABASE_URL"]:
        config["DATABASE_URL"] = "sqlite:///" + os.path.join(instance_path, "tweepy.sqlite3")
    if not config["SECRET_KEY"]:
        config["SECRET_KEY"] = _instance_secret(Path(instance_path) / "secret_key")
    if config["CACHE"] not in ("none", "local"):
        raise ValueError(f"TWEEPY_CACHE={config['CACHE']!r}: expected 'none' or 'local'")
    return config


def _instance_secret(path: Path) -> str:
    """A random key made on first start and kept, so sessions survive restarts."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside then linked into place: when several workers start at once,
    # the first link wins and nobody ever reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(secrets.token_hex(32))
    os.chmod(tmp, 0o600)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()
