"""Memoized reads, and how every process learns that a write made them stale.

Reads in ``queries.py`` are wrapped in ``@memoized("name")``; writes in
``writes.py`` call ``forget(key, ...)`` inside their own transaction. With
``CACHE=none`` both are no-ops and every read goes to the database.

With ``CACHE=local`` each process keeps its own TTL cache (cachetools). The
catch, as the talk puts it, is that "the application is stateful now": a
process that did not serve the write still holds the old page. So ``forget``
also appends the key to an invalidation log, a table written in the same
transaction as the data (it commits or rolls back with it), and every process
replays that log:

* at least every ``CACHE_SYNC_INTERVAL`` seconds: the staleness bound for
  everyone;
* at once when the request's session says its user wrote something this
  process has not replayed yet: read-your-writes for the writer, whichever
  process serves the next page.

Another backend (Redis, for the scale-out stage) implements ``ReadCache``,
the small interface below; nothing outside this module knows which one runs.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Hashable
from datetime import timedelta
from typing import Any, Protocol

import cachetools
from flask import Flask, current_app, g, session
from sqlalchemy import delete, func, insert, select

from .extensions import db
from .models import CacheInvalidation, utcnow

# Log entries are kept this long; a process that has not replayed the log for
# half of it may have missed some, and drops its whole cache instead.
LOG_RETENTION = timedelta(minutes=10)
SESSION_KEY = "seen_write"


class ReadCache(Protocol):
    """What the app asks of a read cache."""

    enabled: bool

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value kept under ``key``, or ``compute()``'s, kept if still valid."""

    def forget(self, *keys: str) -> None:
        """Within a write's transaction: these keys are stale once it commits."""

    def after_commit(self) -> None:
        """The write committed: drop what it forgot."""

    def after_rollback(self) -> None:
        """The write rolled back: forget nothing."""

    def sync(self, at_least: int | None = None) -> None:
        """Catch up with other processes' writes (all of them up to ``at_least``, if given)."""


class NoCache:
    """Every read goes to the database; nothing to forget."""

    enabled = False

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        return compute()

    def forget(self, *keys: str) -> None:
        pass

    def after_commit(self) -> None:
        pass

    def after_rollback(self) -> None:
        pass

    def sync(self, at_least: int | None = None) -> None:
        pass


class LocalCache:
    """A per-process TTL cache kept fresh by replaying the invalidation log."""

    enabled = True

    def __init__(self, size: int, ttl: float, sync_interval: float) -> None:
        self.entries: cachetools.TTLCache = cachetools.TTLCache(maxsize=size, ttl=ttl)
        # When each key was last evicted, counted in evictions: a read that began
        # before its key was evicted may hold stale rows and must not be stored.
        self.evicted_at: cachetools.TTLCache = cachetools.TTLCache(maxsize=size, ttl=max(ttl, 60))
        self.evictions = 0
        self.cleared_at = 0
        self.sync_interval = sync_interval
        self.applied: int | None = None  # last log id replayed here
        self.synced_at = 0.0
        # uWSGI threads or gevent greenlets share this object; syncs must not interleave.
        self.lock = threading.RLock()

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        try:
            return self.entries[key]
        except KeyError:
            pass
        epoch = g.get("cache_epoch", self.evictions)
        value = compute()
        with self.lock:
            if self.cleared_at <= epoch and self.evicted_at.get(key, -1) <= epoch:
                self.entries[key] = value
        return value

    def forget(self, *keys: str) -> None:
        """Log the keys in the current transaction; evict them here once it commits."""
        if not keys:
            return
        result = db.session.execute(
            insert(CacheInvalidation).returning(CacheInvalidation.id),
            [{"key": key} for key in keys],
        )
        last = max(result.scalars())
        if last % 1000 == 0:
            prune_log()
        g.setdefault("forgotten", []).extend(keys)
        g.forgotten_up_to = last

    def after_commit(self) -> None:
        keys = g.pop("forgotten", ())
        if keys:
            g.cache_write = g.pop("forgotten_up_to")
            with self.lock:
                self._evict(keys)

    def after_rollback(self) -> None:
        g.pop("forgotten", None)
        g.pop("forgotten_up_to", None)

    def sync(self, at_least: int | None = None) -> None:
        now = time.monotonic()
        if self.applied is not None and now - self.synced_at < self.sync_interval:
            if at_least is None or at_least <= self.applied:
                return
        with self.lock:
            newest = db.session.scalar(select(func.max(CacheInvalidation.id))) or 0
            if self.applied is None or now - self.synced_at > LOG_RETENTION.total_seconds() / 2:
                # First sync, or asleep long enough to have missed pruned entries.
                self.entries.clear()
                self.evictions += 1
                self.cleared_at = self.evictions
            elif newest > self.applied:
                keys = db.session.scalars(
                    select(CacheInvalidation.key)
                    .where(CacheInvalidation.id > self.applied, CacheInvalidation.id <= newest)
                )
                self._evict(keys)
            self.applied = max(newest, self.applied or 0)
            self.synced_at = now

    def _evict(self, keys) -> None:
        self.evictions += 1
        for key in keys:
            self.entries.pop(key, None)
            self.evicted_at[key] = self.evictions


def prune_log() -> None:
    """Drop log entries nobody can still need (called now and then by writes)."""
    db.session.execute(delete(CacheInvalidation).where(CacheInvalidation.created < utcnow() - LOG_RETENTION))


def cache() -> ReadCache:
    return current_app.extensions["tweepy_cache"]


def memoized(name: str) -> Callable:
    """Cache a read under ``name:arg1:arg2``; ``forget`` takes the same key."""

    def decorate(read: Callable) -> Callable:
        @functools.wraps(read)
        def cached_read(*args: Hashable) -> Any:
            return cache().get_or_compute(key(name, *args), lambda: read(*args))

        cached_read.uncached = read
        return cached_read

    return decorate


def key(name: str, *args: Hashable) -> str:
    return ":".join((name, *map(str, args)))


def forget(*keys: str) -> None:
    cache().forget(*keys)


def init_app(app: Flask) -> None:
    if app.config["CACHE"] == "local":
        backend = LocalCache(app.config["CACHE_SIZE"], app.config["CACHE_TTL"], app.config["CACHE_SYNC_INTERVAL"])
    else:
        backend = NoCache()
    app.extensions["tweepy_cache"] = backend
    if isinstance(backend, NoCache):
        return

    @app.before_request
    def catch_up_with_other_processes() -> None:
        backend.sync(at_least=session.get(SESSION_KEY))
        # This request's reads all come after the sync, so they may fill what it
        # evicted; a key evicted after this point was changed under them, and is not stored.
        g.cache_epoch = backend.evictions

    @app.after_request
    def remember_own_writes(response):
        # The writer's next request, wherever it lands, replays up to here first.
        if "cache_write" in g:
            session[SESSION_KEY] = g.cache_write
        return response
