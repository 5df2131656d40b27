"""Limits on logins and registrations, counted before any password is hashed.

A hash is slow on purpose (bcrypt), so a client that may try passwords without limit can both guess
them and keep the machine busy; yet a limit anyone can reach is a way to lock others out. So a login
from a device that logged in to the account before (its signed cookie, ``devices.py``) counts against
that device only; any other counts against the account from this address, the address, and the
account as a whole (a limit far above what a person types, which only slows guessing). An attempt is
counted before its hash and taken back when it succeeds or is refused, so concurrent guesses get at
most a limit's worth of hashes. A registration counts before the form says a name is taken.

The counts are rows of ``throttle_events`` (written by ``writes.py``), seen by every process and node,
or with ``THROTTLE_IN_REDIS`` sorted sets in the Redis of ``CACHE_URL`` (``RedisCounts``), falling back
to the database while it cannot be reached. ``UNTHROTTLED_ADDRESSES`` (a load generator) are never
counted nor refused per address. Writes have per-account limits a minute, in each process (``WriteRates``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta

import cachetools
from flask import Flask, current_app, request

from . import queries, writes
from .errors import TooMany
from .models import utcnow

FAILED_LOGIN_BY_ACCOUNT = "login-account"
FAILED_LOGIN_BY_ADDRESS = "login-address"
FAILED_LOGIN_FROM_HERE = "login-here"  # per account and address
FAILED_LOGIN_ON_DEVICE = "login-device"  # per account and known device
REGISTRATION = "register-address"
# After Redis fails to answer, a process counts in the database this long before asking it
# again, so during an outage only one request a process a second waits for the timeout.
REDIS_RETRY_S = 1.0
# Accounts whose writes a process counts at once (about 100 bytes each); the least recent leave first.
WRITERS_COUNTED = 100_000
WRITE_WINDOW_S = 60

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
    from_here = "Too many failed logins for this account from here."
    return {
        FAILED_LOGIN_FROM_HERE: Limit(
            FAILED_LOGIN_FROM_HERE, config["LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS"], login_window, from_here
        ),
        FAILED_LOGIN_ON_DEVICE: Limit(
            FAILED_LOGIN_ON_DEVICE, config["LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS"], login_window, from_here
        ),
        FAILED_LOGIN_BY_ADDRESS: Limit(
            FAILED_LOGIN_BY_ADDRESS,
            config["LOGIN_FAILURES_PER_ADDRESS"],
            login_window,
            "Too many failed logins from your address.",
        ),
        FAILED_LOGIN_BY_ACCOUNT: Limit(
            FAILED_LOGIN_BY_ACCOUNT,
            config["LOGIN_FAILURES_PER_ACCOUNT"],
            login_window,
            "Too many failed logins for this account; a device that logged in to it before still can.",
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

    def note_and_count(self, checked: list[tuple[Limit, str]]) -> tuple[list[str], list[int]] | None:
        """Add an attempt, now, for each subject, and count each one's attempts within its window, in one
        transaction (so concurrent attempts are counted in order); the attempts' members and the counts,
        or None if Redis did not answer."""
        if time.monotonic() < self.unreachable_until:
            return None
        now = time.time()
        members = [secrets.token_hex(8) for _ in checked]
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for (limit, subject), member in zip(checked, members, strict=True):
                    name = self.name(limit.kind, subject)
                    pipe.zremrangebyscore(name, "-inf", f"({now - limit.window.total_seconds()}")
                    pipe.zadd(name, {member: now})
                    pipe.expire(name, math.ceil(limit.window.total_seconds()))
                    pipe.zcard(name)
                replies = pipe.execute()
        except self.failed as error:
            self._lost(error)
            return None
        self._answered()
        return members, replies[3::4]

    def withdraw(self, noted: list[tuple[Limit, str, str]], cleared: tuple[str, str] | None) -> None:
        """Take back these attempts, and with ``cleared`` every attempt of that (kind, subject)."""
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for limit, subject, member in noted:
                    pipe.zrem(self.name(limit.kind, subject), member)
                if cleared is not None:
                    pipe.delete(self.name(*cleared))
                pipe.execute()
        except self.failed as error:  # they stay counted, as failures would
            self._lost(error)

    def _lost(self, error: Exception) -> None:
        if self.answering:
            log.warning("throttle: Redis unreachable (%s); counting attempts in the database", error)
        self.answering = False
        self.unreachable_until = time.monotonic() + REDIS_RETRY_S

    def _answered(self) -> None:
        if not self.answering:
            log.warning("throttle: Redis answers again; counting attempts there")
        self.answering = True


class WriteRates:
    """Each account's writes of each kind in this minute, in this process."""

    def __init__(self) -> None:
        self.counted: cachetools.LRUCache = cachetools.LRUCache(WRITERS_COUNTED)

    def count(self, kind: str, user_id: int, most: int, now: float) -> None:
        """Count a write, or refuse it (``TooMany``) if the account made ``most`` of them this minute."""
        minute, into = divmod(now, WRITE_WINDOW_S)
        key = (kind, user_id)
        counted_minute, made = self.counted.get(key, (minute, 0))
        if counted_minute != minute:
            made = 0
        if made >= most:
            retry_after = math.ceil(WRITE_WINDOW_S - into)
            raise TooMany(f"That is a lot of {kind} for a minute: try again in {retry_after} s.", retry_after)
        self.counted[key] = (minute, made + 1)


def count_write(kind: str, user_id: int) -> None:
    """Refuse (``TooMany``) a post (``kind`` "tweets") or a follow or unfollow ("follows") past its limit."""
    most = current_app.config["TWEETS_PER_MINUTE" if kind == "tweets" else "FOLLOWS_PER_MINUTE"]
    current_app.extensions["tweepy_write_rates"].count(kind, user_id, most, time.time())


def init_app(app: Flask) -> None:
    app.extensions["tweepy_write_rates"] = WriteRates()
    if app.config["THROTTLE_IN_REDIS"]:
        app.extensions["tweepy_throttle"] = RedisCounts(
            app.config["CACHE_URL"], app.config["CACHE_KEY_PREFIX"], app.config["CACHE_TIMEOUT_S"]
        )


def _redis_counts() -> RedisCounts | None:
    return current_app.extensions.get("tweepy_throttle")


def client_address() -> str:
    # nginx passes the client's own address (uwsgi_params' REMOTE_ADDR); the development server sees it directly.
    return (request.remote_addr or "unknown")[:64]


@dataclass
class Attempt:
    """A counted attempt: what it was counted against, and how to take it back."""

    noted: list[tuple[Limit, str, str | int]]  # each limit and subject, with the attempt's member or row id
    in_redis: bool
    cleared_on_success: tuple[str, str] | None = None

    def withdraw(self, cleared: tuple[str, str] | None = None) -> None:
        if not self.noted:
            return
        counts = _redis_counts()
        if self.in_redis and counts is not None:
            counts.withdraw(self.noted, cleared)
        else:
            writes.withdraw_attempts([row for _limit, _subject, row in self.noted], cleared)

    def succeeded(self) -> None:
        """Not a failure: taken back, and the failures of its device (or account and address) cleared."""
        self.withdraw(self.cleared_on_success)


def _count(*attempts: tuple[str, str], cleared_on_success: tuple[str, str] | None = None) -> Attempt:
    """Count an attempt against each (kind, subject); refuse (``TooMany``), taking it back, if that is
    more than a limit allows, the first such limit saying why."""
    limits = _limits()
    checked = [(limits[kind], subject) for kind, subject in attempts]
    if not checked:
        return Attempt([], in_redis=False)
    counts = _redis_counts()
    in_redis = None if counts is None else counts.note_and_count(checked)
    if in_redis is not None:
        members, recent = in_redis
        attempt = Attempt([(*each, member) for each, member in zip(checked, members, strict=True)], True)
    else:
        # Committed before counting: of concurrent attempts, the last to count sees every other.
        ids = writes.note_attempts(list(attempts))
        attempt = Attempt([(*each, row) for each, row in zip(checked, ids, strict=True)], False)
        now = utcnow()
        recent = (queries.recent_events(limit.kind, subject, now - limit.window) for limit, subject in checked)
    attempt.cleared_on_success = cleared_on_success
    for (limit, _subject), seen in zip(checked, recent, strict=False):
        if seen > limit.most:
            attempt.withdraw()
            seconds = limit.window.total_seconds()
            raise TooMany(f"{limit.message} Try again in {math.ceil(seconds / 60)} minutes.", retry_after=int(seconds))
    return attempt


def _exempt(address: str) -> bool:
    return address in {a.strip() for a in current_app.config["UNTHROTTLED_ADDRESSES"].split(",") if a.strip()}


def from_here(account: str, address: str) -> str:
    """The subject of an account's logins from one address: it fits in 64 characters (a name has 32 at
    most), with a digest of the address."""
    return f"{account}|{hashlib.blake2b(address.encode(), digest_size=12).hexdigest()}"


def begin_login(name: str, address: str, device: str | None) -> Attempt:
    """Count a login attempt before its password is hashed, or refuse it (``TooMany``).

    ``device`` is the id of a device that logged in to this account before: its attempts count against
    that device alone. The caller ends the attempt with ``succeeded()`` or, if it was never tried,
    ``withdraw()``; a failure stays counted.
    """
    account = name.lower() if queries.is_possible_name(name) else None
    if account is not None and device is not None:
        on_device = (FAILED_LOGIN_ON_DEVICE, f"{account}|{device}")
        return _count(on_device, cleared_on_success=on_device)
    attempts = []
    here = None
    if account is not None:
        here = (FAILED_LOGIN_FROM_HERE, from_here(account, address))
        attempts.append(here)
    if not _exempt(address):
        attempts.append((FAILED_LOGIN_BY_ADDRESS, address))
    if account is not None:
        attempts.append((FAILED_LOGIN_BY_ACCOUNT, account))
    return _count(*attempts, cleared_on_success=here)


def begin_registration(address: str) -> Attempt:
    """Count a registration attempt from this address, or refuse it (``TooMany``); it counts whatever comes
    of it, so the form's answers (a name or email taken) are as limited as the accounts made."""
    return Attempt([], in_redis=False) if _exempt(address) else _count((REGISTRATION, address))
