"""Where the servers some tests need (PostgreSQL, Redis) are, and what happens when they are not there.

Addresses come from ``TWEEPY_TEST_POSTGRES_URL`` and ``TWEEPY_TEST_REDIS_URL``,
by default the machine's own servers on 127.0.0.1. A test that asks for a
server that does not answer is skipped, with the reason in pytest's summary,
on a developer's machine; with ``TWEEPY_REQUIRE_SERVICES=1`` (CI sets it, after
``scripts/services`` made sure both run) it fails instead, so a stopped server
can never turn into a green run that tested nothing.
"""

from __future__ import annotations

from functools import cache

import pytest
from sqlalchemy.engine import make_url

from tweepy.config import Setting

TEST_POSTGRES_URL = Setting(
    "TEST_POSTGRES_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "The PostgreSQL tests create (and drop) databases of their own from this one",
)
TEST_REDIS_URL = Setting("TEST_REDIS_URL", "redis://127.0.0.1:6379/0", "The Redis the tests use")
REQUIRE_SERVICES = Setting(
    "REQUIRE_SERVICES", "0", "1: a test whose PostgreSQL or Redis is unreachable fails instead of skipping (CI)"
)
SETTINGS = (TEST_POSTGRES_URL, TEST_REDIS_URL, REQUIRE_SERVICES)
POSTGRES_URL = TEST_POSTGRES_URL.read()
REDIS_URL = TEST_REDIS_URL.read()
CONNECT_TIMEOUT_S = 3


def services_required() -> bool:
    return REQUIRE_SERVICES.read() not in ("", "0")


def _unreachable(service: str, url: str, problem: str):
    message = f"{service} at {url} is unreachable: {problem}"
    if services_required():
        pytest.fail(f"{message} (TWEEPY_REQUIRE_SERVICES=1: it must run; see scripts/services)", pytrace=False)
    pytest.skip(f"SKIPPED FOR WANT OF A SERVER: {message}; start it with scripts/services")


@cache
def _postgres_problem(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=CONNECT_TIMEOUT_S) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return " ".join(str(error).split()) or type(error).__name__
    return None


@cache
def _redis_problem(url: str) -> str | None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=CONNECT_TIMEOUT_S).ping()
    except (redis.RedisError, OSError) as error:
        return " ".join(str(error).split()) or type(error).__name__
    return None


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL as psycopg itself takes it (no ``+psycopg`` driver part)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_url() -> str:
    """The SQLAlchemy URL of the test PostgreSQL server's maintenance database; skips or fails if it is down."""
    problem = _postgres_problem(POSTGRES_URL)
    if problem:
        _unreachable("PostgreSQL", POSTGRES_URL, problem)
    return POSTGRES_URL


def redis_url() -> str:
    """The URL of the test Redis server; skips or fails if it is down."""
    problem = _redis_problem(REDIS_URL)
    if problem:
        _unreachable("Redis", REDIS_URL, problem)
    return REDIS_URL
