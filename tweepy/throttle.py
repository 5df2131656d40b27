"""Limits on failed logins and registrations, checked before any password is hashed.

A hash is slow on purpose (bcrypt), so a client that may try passwords without limit can both guess
them and keep the machine busy. A failed login counts against the account and against the client's
address; a registration against the address. Successful logins never count. The counts are rows of
``throttle_events`` (written by ``writes.py``), so every process, and every node sharing the
database, sees the same ones; they are checked with one indexed count each. With
``THROTTLE_IN_REDIS`` they live in the Redis of ``CACHE_URL`` instead (``RedisCounts``).

Addresses in ``UNTHROTTLED_ADDRESSES`` are counted like any other but never refused: a load
generator plays thousands of people from one address. The per-account limit holds for everyone.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from flask import Flask, current_app, request

from . import queries
from .errors import TooMany
from .models import utcnow

FAILED_LOGIN_BY_ACCOUNT = "login-account"
FAILED_LOGIN_BY_ADDRESS = "login-address"
REGISTRATION = "register-address"
# Writes drop events older than the longest window about once every this many events.
PRUNE_EVERY = 500
LONGEST_WINDOW = timedelta(days=1)
# After Redis fails to answer, a process counts in the database this long before asking it
# again, so during an outage only one request a process a second waits for the timeout.
REDIS_RETRY_S = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limit:
    kind: str
    most: int  # attempts allowed in the window; the next one is refused
    window: timedelta
    message: str


def _limits() -> dict[str, Limit]:
    config = current_app.config
    login_window = timedelta(seconds=config["LOGIN_FAILURE_WINDOW_S"])
    return {
        FAILED_LOGIN_BY_ACCOUNT: Limit(
            FAILED_LOGIN_BY_ACCOUNT,
            config["LOGIN_FAILURES_PER_ACCOUNT"],
            login_window,
            "Too many failed logins for this account.",
        ),
        FAILED_LOGIN_BY_ADDRESS: Limit(
            FAILED_LOGIN_BY_ADDRESS,
            config["LOGIN_FAILURES_PER_ADDRESS"],
            login_window,
            "Too many failed logins from your address.",
        ),
        REGISTRATION: Limit(
            REGISTRATION,
            config["REGISTRATIONS_PER_ADDRESS"],
            timedelta(seconds=config["REGISTRATION_WINDOW_S"]),
            "Too many new accounts from your address.",
        ),
    }


class RedisCounts:
    """Recent attempts per (kind, subject), as sorted sets of their times in one Redis for every node.

    Shared by every node just as the table is, and costing the database nothing: one sorted set of
    attempt times (each node's clock, as the rows' are) per kind and subject, trimmed to the window
    whenever it is read or added to, under ``throttle:`` + ``CACHE_KEY_PREFIX`` (so deployments
    sharing a Redis stay apart, and the cache's drop of its own prefix never touches them). While
    that Redis cannot be reached, attempts are counted and checked in the database, as without the
    setting. The two stores' counts do not add up, so an outage can give a guesser a second quota
    for as long as it lasts, no more. Each set expires one window after its last attempt; Redis
    must not drop them sooner: under ``maxmemory`` with ``volatile-lru`` (the cache's advice) they
    are as evictable as cached pages, and an evicted set is a fresh quota, so give Redis the memory
    to keep them (or ``noeviction``).
    """

    def __init__(self, url: str, prefix: str, timeout: float) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # One retry, at once: a pooled connection that a Redis restart closed is replaced, no more.
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1)
        )
        self.failed = (redis.RedisError, OSError)
        self.prefix = f"throttle:{prefix}"
        self.answering = True
        self.unreachable_until = 0.0

    def name(self, kind: str, subject: str) -> str:
        return f"{self.prefix}{kind}:{subject}"

    def counts(self, checked: list[tuple[Limit, str]]) -> list[int] | None:
        """Each subject's attempts within its limit's window, in one round trip; None if Redis cannot say."""
        replies = self._round_trip(checked, lambda pipe, name, _limit, _now: pipe.zcard(name))
        return None if replies is None else replies[1::2]

    def note(self, attempts: list[tuple[Limit, str]]) -> bool:
        """Add an attempt, now, for each subject, in one round trip; False if Redis did not take them."""

        def add(pipe, name: str, limit: Limit, now: float) -> None:
            pipe.zadd(name, {secrets.token_hex(8): now})
            pipe.expire(name, math.ceil(limit.window.total_seconds()))

        return self._round_trip(attempts, add) is not None

    def _round_trip(self, subjects: list[tuple[Limit, str]], then: Callable) -> list | None:
        """One transaction over each subject's set: trimmed to its window (an unthrottled address is never
        checked, only noted, so noting trims too), then ``then``'s commands; None if Redis did not answer."""
        if time.monotonic() < self.unreachable_until:
            return None
        now = time.time()
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for limit, subject in subjects:
                    name = self.name(limit.kind, subject)
                    pipe.zremrangebyscore(name, "-inf", f"({now - limit.window.total_seconds()}")
                    then(pipe, name, limit, now)
                replies = pipe.execute()
        except self.failed as error:
            self._lost(error)
            return None
        self._answered()
        return replies

    def _lost(self, error: Exception) -> None:
        if self.answering:
            log.warning("throttle: Redis unreachable (%s); counting attempts in the database", error)
        self.answering = False
        self.unreachable_until = time.monotonic() + REDIS_RETRY_S

    def _answered(self) -> None:
        if not self.answering:
            log.warning("throttle: Redis answers again; counting attempts there")
        self.answering = True


def init_app(app: Flask) -> None:
    if app.config["THROTTLE_IN_REDIS"]:
        app.extensions["tweepy_throttle"] = RedisCounts(
            app.config["CACHE_URL"], app.config["CACHE_KEY_PREFIX"], app.config["CACHE_TIMEOUT_S"]
        )


def _redis_counts() -> RedisCounts | None:
    return current_app.extensions.get("tweepy_throttle")


def noted_in_redis(*attempts: tuple[str, str]) -> bool:
    """Count these (kind, subject) attempts in Redis if the app counts there and Redis takes them;
    False means the caller (``writes.py``) must note them in the database."""
    counts = _redis_counts()
    if counts is None:
        return False
    limits = _limits()
    return counts.note([(limits[kind], subject) for kind, subject in attempts])


def client_address() -> str:
    # nginx passes the client's own address (uwsgi_params' REMOTE_ADDR); the development server sees it directly.
    return (request.remote_addr or "unknown")[:64]


def _check(*attempts: tuple[str, str]) -> None:
    """Refuse if any (kind, subject) reached its limit; the first that did says why."""
    if not attempts:
        return
    limits = _limits()
    checked = [(limits[kind], subject) for kind, subject in attempts]
    counts = _redis_counts()
    in_redis = None if counts is None else counts.counts(checked)
    for i, (limit, subject) in enumerate(checked):
        # The database counts one at a time, so a refusal by the first limit spares the second count.
        recent = (
            in_redis[i] if in_redis is not None else queries.recent_events(limit.kind, subject, utcnow() - limit.window)
        )
        if recent >= limit.most:
            seconds = limit.window.total_seconds()
            raise TooMany(f"{limit.message} Try again in {math.ceil(seconds / 60)} minutes.", retry_after=int(seconds))


def _exempt(address: str) -> bool:
    return address in {a.strip() for a in current_app.config["UNTHROTTLED_ADDRESSES"].split(",") if a.strip()}


def check_login(name: str, address: str) -> None:
    """Refuse (``TooMany``) a login whose account or address failed too often lately."""
    checks = []
    if queries.is_possible_name(name):
        checks.append((FAILED_LOGIN_BY_ACCOUNT, name.lower()))
    if not _exempt(address):
        checks.append((FAILED_LOGIN_BY_ADDRESS, address))
    _check(*checks)


def check_registration(address: str) -> None:
    """Refuse (``TooMany``) a registration from an address that registered too often lately."""
    if not _exempt(address):
        _check((REGISTRATION, address))
