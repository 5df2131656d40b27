"""Every setting the app reads, with its default, from ``TWEEPY_*`` variables.

A setting is read from the environment variable of the same name with a
``TWEEPY_`` prefix (``DATABASE_URL`` from ``TWEEPY_DATABASE_URL``);
``create_app(overrides)`` wins over both. How a stage is served (which server,
how many processes, gevent) is not the app's business: those settings belong
to the stage runner, ``tools/stages/``. The README lists both.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Setting:
    """A setting of the project, whoever reads it (the app, the stage runner, the bench, the tests):
    ``tools/settings.py`` gathers every declaration into the README's table."""

    name: str  # the app's and the runner's without their TWEEPY_ prefix; the others their whole variable
    default: Any
    help: str
    minimum: float | None = None  # numbers only: smaller values are refused

    @property
    def variable(self) -> str:
        """The environment variable it is read from."""
        return self.name if self.name.startswith(("TWEEPY_", "LOCUST_")) else f"TWEEPY_{self.name}"

    def parse(self, raw: str) -> Any:
        """Its value from a text, of its default's type, checked against its minimum."""
        if isinstance(self.default, bool):
            try:
                return _BOOLEAN_WORDS[raw.strip().lower()]
            except KeyError:
                raise ValueError(f"{self.variable}={raw!r} is not a boolean") from None
        if not isinstance(self.default, (int, float)):
            return raw
        try:
            value = type(self.default)(raw)
        except ValueError:
            raise ValueError(f"{self.variable}={raw!r} is not a number") from None
        if self.minimum is not None and not value >= self.minimum:  # also refuses NaN
            raise ValueError(f"{self.variable}={raw!r} must be at least {self.minimum:g}")
        return value

    def read(self, environ: Mapping[str, str] | None = None) -> Any:
        """Its value from the environment: its variable's, or its default when that is unset."""
        raw = (os.environ if environ is None else environ).get(self.variable)
        return self.default if raw is None else self.parse(raw)


SETTINGS: tuple[Setting, ...] = (
    # Where things live.
    Setting("DATABASE_URL", "", "SQLAlchemy database URL (default: a SQLite file in the instance folder)"),
    Setting("INSTANCE_PATH", "", "Folder for the SQLite file and the secret key (default: instance/ beside tweepy/)"),
    Setting("SECRET_KEY", "", "Signs sessions and CSRF tokens (default: generated once, kept in the instance folder)"),
    # Passwords.
    Setting("BCRYPT_LOG_ROUNDS", 12, "bcrypt cost; the benchmark reports it next to every figure"),
    Setting(
        "BCRYPT_LIBRARY",
        "pyca",
        "bcrypt's implementation: 'pyca' (the bcrypt package) or 'libxcrypt' (the system's: same hashes, less CPU)",
    ),
    Setting("BCRYPT_IN_THREADPOOL", False, "Hash on native threads of the process's own so greenlets keep running"),
    Setting("HASHING_SLOTS", 1, "Passwords a process hashes at once (its native threads, with BCRYPT_IN_THREADPOOL)"),
    Setting("HASH_WAIT_S", 3.0, "Longest a login waits for a hashing slot, from when nginx got it; then 503"),
    Setting(
        "HASH_KNOWN_DEVICES_FIRST",
        False,
        "Logins from a device the account knows (its device cookie) wait in a lane served before everyone else's",
    ),
    Setting(
        "PAGES_LATE_S",
        0.0,
        "With BCRYPT_IN_THREADPOOL: once every request for a second waited this long to reach the app, "
        "hash on one thread fewer until they catch up (0: never)",
    ),
    Setting(
        "PAGES_NICE",
        0,
        "With BCRYPT_IN_THREADPOOL: how far below the hashing threads the thread serving pages runs (nice)",
    ),
    Setting(
        "NEWCOMERS_NICE",
        0,
        "With BCRYPT_IN_THREADPOOL and HASH_KNOWN_DEVICES_FIRST: browsers new to the site hash in a queue of "
        "their own, on threads this far below the known devices' (nice; over PAGES_NICE: below the pages) "
        "while more are due back than it hashes in a wait (a herd), the known devices' too while the herd "
        "is being refused; 0: one queue",
        0,
    ),
    # Limits, checked before any password is hashed (throttle.py).
    Setting(
        "LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS",
        10,
        "Failed logins an account may have from one address (or one device it knows) in the window",
    ),
    Setting(
        "LOGIN_FAILURES_PER_ACCOUNT",
        100,
        "Failed logins an account may have in the window from all addresses; its known devices may still log in",
    ),
    Setting("LOGIN_FAILURES_PER_ADDRESS", 100, "Failed logins one client address may have in the window"),
    Setting("LOGIN_FAILURE_WINDOW_S", 900, "The window failed logins are counted in, in seconds"),
    Setting("REGISTRATIONS_PER_ADDRESS", 20, "New accounts one client address may make in the registration window"),
    Setting("REGISTRATION_WINDOW_S", 3600, "The window registrations are counted in, in seconds"),
    Setting(
        "UNTHROTTLED_ADDRESSES",
        "",
        "Comma-separated addresses never counted nor refused per address (a load generator on loopback)",
    ),
    Setting("TWEETS_PER_MINUTE", 60, "Tweets an account may post in a minute, counted in each process"),
    Setting("FOLLOWS_PER_MINUTE", 60, "Follows and unfollows an account may make in a minute, counted in each process"),
    Setting(
        "THROTTLE_IN_REDIS",
        False,
        "Count failed logins and registrations in the Redis of CACHE_URL instead of the database",
    ),
    # Sessions.
    Setting(
        "SECURE_COOKIES",
        False,
        "Cookies over https only, named __Host-session and __Host-tweepy_device (set it behind https)",
    ),
    Setting(
        "TRUSTED_PROXIES",
        0,
        "Proxies in front of nginx (a TLS front) whose X-Forwarded-For and -Proto are believed; 0: none",
    ),
    Setting("SESSION_LIFETIME_S", 14 * 24 * 3600, "Longest a session lives from its log in, in seconds"),
    Setting("SESSION_IDLE_S", 2 * 24 * 3600, "A session ends after this many seconds without a request"),
    # Pages and requests.
    Setting("PAGE_SIZE", 50, "Tweets or users per page"),
    Setting("MAX_CONTENT_LENGTH", 1024 * 1024, "Largest request body accepted; bigger ones get 413"),
    Setting("WORKER_HEADER", False, "Name the answering process in an X-Tweepy-Worker header (tests use it)"),
    # SQLite tuning; ignored for other databases.
    Setting("SQLITE_TUNED", False, "WAL, synchronous=NORMAL, cache, mmap and temp_store pragmas"),
    Setting("SQLITE_BUSY_TIMEOUT_MS", 5000, "How long a connection waits for a lock before 'database is locked'"),
    Setting("SQLITE_CACHE_MB", 64, "Page cache per connection, in MiB (tuned only)"),
    Setting("SQLITE_MMAP_MB", 256, "Memory-mapped I/O size, in MiB (tuned only)"),
    # Connection pool: bounded, so concurrent requests cannot exhaust the database.
    Setting("DB_POOL_SIZE", 5, "Connections kept per process"),
    Setting("DB_POOL_OVERFLOW", 0, "Extra connections a process may open under load"),
    Setting("DB_POOL_TIMEOUT", 10, "Seconds a request waits for a pooled connection"),
    Setting(
        "DB_READS_AUTOCOMMIT",
        False,
        "PostgreSQL: reads run in autocommit, with no BEGIN and ROLLBACK round trips; writes still in transactions",
    ),
    Setting(
        "DB_ONE_STATEMENT_WRITES",
        False,
        "PostgreSQL with DB_READS_AUTOCOMMIT and a local or near cache: a tweet, follow or unfollow and its"
        " cache log entries are one statement, one round trip, not BEGIN, the change, the log and COMMIT",
    ),
    # Memoized reads.
    Setting(
        "CACHE", "none", "Read cache: 'none', 'local' (in-process, cross-process invalidation) or 'redis' (shared)"
    ),
    Setting("CACHE_BYTES", 256 * 1024 * 1024, "Bytes of cached reads kept per process (an author's page: ~20 KB)"),
    Setting("CACHE_TTL", 300, "Seconds an entry may live even with no invalidation (a safety net)"),
    Setting(
        "CACHE_SYNC_INTERVAL",
        1.0,
        "Seconds between checks of other processes' writes: the staleness bound (redis: after an outage)",
    ),
    Setting(
        "CACHE_WRITE_SIGNAL",
        True,
        "local, on SQLite: every process sees a committed write at its next request (a counter beside the database)",
    ),
    Setting(
        "CACHE_NEAR",
        False,
        "redis: keep entries in each process too, fresh by the invalidation log (others see a write within "
        "CACHE_SYNC_INTERVAL)",
    ),
    Setting(
        "CACHE_NEAR_SESSIONS",
        False,
        "With CACHE_NEAR: who is logged in is kept near too (a round trip less a request), trusted while Redis "
        "pushes every change of it, so a log out still ends every copy of its cookie at once",
    ),
    Setting("CACHE_URL", "redis://127.0.0.1:6379/0", "The Redis of CACHE=redis (a password in it is never logged)"),
    Setting("CACHE_KEY_PREFIX", "tweepy:", "Starts every key CACHE=redis writes, so deployments can share one Redis"),
    Setting(
        "CACHE_TIMEOUT_S", 0.25, "Longest wait for a Redis reply (tried twice); then the database serves, nothing kept"
    ),
    Setting(
        "TIMELINE_FROM_CACHED_PAGES",
        False,
        "Merge a timeline's first page from each author's cached page (the merge kept while they are unchanged)",
    ),
    # Rendered tweets.
    Setting(
        "FRAGMENT_CACHE",
        False,
        "Keep rendered HTML per process: each tweet (keyed by row and template), each viewer's last list and timeline",
    ),
    Setting("FRAGMENT_CACHE_BYTES", 64 * 1024 * 1024, "Bytes of rendered HTML kept per process"),
)

_BOOLEAN_WORDS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


BY_NAME = {setting.name: setting for setting in SETTINGS}


def read(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """One setting: the override, else its ``TWEEPY_*`` variable, else its default."""
    if overrides and name in overrides:
        return overrides[name]
    return BY_NAME[name].read()


def load(instance_path: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The effective settings: defaults, then ``TWEEPY_*`` variables, then overrides."""
    overrides = dict(overrides or {})
    config = {setting.name: read(setting.name) for setting in SETTINGS}
    # Overrides may also carry Flask's own keys (TESTING, WTF_CSRF_ENABLED...).
    config.update(overrides)
    config["INSTANCE_PATH"] = instance_path

    if not config["DATABASE_URL"]:
        config["DATABASE_URL"] = "sqlite:///" + os.path.join(instance_path, "tweepy.sqlite3")
    if not config["SECRET_KEY"]:
        config["SECRET_KEY"] = _instance_secret(Path(instance_path) / "secret_key")
    if config["CACHE"] not in ("none", "local", "redis"):
        raise ValueError(f"TWEEPY_CACHE={config['CACHE']!r}: expected 'none', 'local' or 'redis'")
    if config["BCRYPT_LIBRARY"] not in ("pyca", "libxcrypt"):
        raise ValueError(f"TWEEPY_BCRYPT_LIBRARY={config['BCRYPT_LIBRARY']!r}: expected 'pyca' or 'libxcrypt'")
    if config["CACHE_NEAR"] and config["CACHE"] != "redis":
        raise ValueError("TWEEPY_CACHE_NEAR keeps a near copy of the Redis cache: it needs TWEEPY_CACHE=redis")
    if config["CACHE_NEAR_SESSIONS"] and not config["CACHE_NEAR"]:
        raise ValueError("TWEEPY_CACHE_NEAR_SESSIONS keeps sessions in the near cache: it needs TWEEPY_CACHE_NEAR")
    if config["NEWCOMERS_NICE"] and not (config["BCRYPT_IN_THREADPOOL"] and config["HASH_KNOWN_DEVICES_FIRST"]):
        raise ValueError(
            "TWEEPY_NEWCOMERS_NICE hashes newcomers on threads of their own, apart from known devices: "
            "it needs TWEEPY_BCRYPT_IN_THREADPOOL and TWEEPY_HASH_KNOWN_DEVICES_FIRST"
        )
    if config["TIMELINE_FROM_CACHED_PAGES"] and config["CACHE"] == "none":
        raise ValueError("TWEEPY_TIMELINE_FROM_CACHED_PAGES merges cached pages: it needs a TWEEPY_CACHE")
    return config


# Query parameters of a database or Redis URL that carry a secret (libpq's, psycopg's and redis-py's names).
SECRET_PARAMETERS = {"password", "sslpassword", "passfile"}


def loggable_url(url: str) -> str:
    """A database or Redis URL as it may be logged: its password hidden, whether it comes as
    ``user:password@`` or as a query parameter (``?password=``)."""
    from sqlalchemy.engine import make_url

    # SQLAlchemy's parser reads a Redis URL's user, password and query the same way.
    parsed = make_url(url)
    hidden = {key: "***" if key.lower() in SECRET_PARAMETERS else value for key, value in parsed.query.items()}
    return parsed.set(query=hidden).render_as_string(hide_password=True)


def shown(config: dict[str, Any]) -> dict[str, Any]:
    """The settings as they may be logged: no secret key, no database or Redis password."""
    visible = {s.name: config[s.name] for s in SETTINGS if s.name != "SECRET_KEY"}
    visible["DATABASE_URL"] = loggable_url(config["DATABASE_URL"])
    visible["CACHE_URL"] = loggable_url(config["CACHE_URL"])
    return visible


def _instance_secret(path: Path) -> str:
    """A random key made on first start and kept, so sessions survive restarts."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Written aside then linked into place: when several workers start at once,
    # the first link wins and nobody ever reads a half-written file. Owner-only
    # from its creation, never readable by others even for a moment.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_hex(32))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()
