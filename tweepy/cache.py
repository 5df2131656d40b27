"""Memoized reads, and how every process learns that a write made them stale.

A read in ``queries.py`` becomes cached with ``@memoized("name")``. The read
owns the name of its entries: ``queries.newest_tweets_by.key(author_id)`` is
the only way to spell the key of an author's newest tweets, and ``forget``
takes nothing else, so a write cannot forget a key that no read uses. Writes
in ``writes.py`` call ``forget`` inside their own transaction. With
``CACHE=none`` every read goes to the database and forgetting is a no-op.

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

With ``CACHE_WRITE_SIGNAL`` on SQLite, whose processes all share one host,
there is no staleness at all: a write that committed bumps a counter in a
small file beside the database (``WriteSignal``, mapped into every process),
before its response leaves, and every request compares that counter with the
value its process last saw, a read of eight bytes. A process that sees it
move replays the log first. So every process sees every committed write at
its next request, which also lets the logged-in user come from the cache (a
log out is seen everywhere at once); ``CACHE_SYNC_INTERVAL`` stays as a
safety net.

What a process computes from its entries (a timeline merged from its
authors' pages, the HTML those rows join into) is kept too, by ``derived``,
with the very entries it was computed from. An entry is immutable, and a write
replaces it rather than changing it, so while every input is still the same
object the result stands: it needs no key to forget and can never outlive a
write. A result computed from many entries (a timeline, from twenty-odd pages)
is kept by ``derived_from_keys`` under the keys of those entries instead, and
the eviction of any of them ends it: finding it costs one lookup, not one an
entry. (An eighth of ``CACHE_BYTES`` holds these results.)

A process evicts its own write's keys as it commits, and the log's entries
are in the order they committed: when nothing lies between what the process
last replayed and its own entries, it counts them replayed, rather than evict
again, a second later, what it has read afresh since. Then every entry it
holds held every write before this one, so a write that knows what one of its
keys holds now (a new tweet, first on its author's page) gives it with
``patch``, and the changed entry is kept instead of read again. Other
processes, and this one when another write does lie between, evict it.

With ``CACHE=redis`` every process of every node shares one cache in Redis
(``RedisCache``), with no layer in front of it: a read that hits costs one
round trip. Each entry is a hash under ``CACHE_KEY_PREFIX + key`` holding the
pickled value and a *generation*, a random token:

* a miss reads the generation, creating it if there is none, in the same
  round trip (a Lua script), then computes the value from the database;
* the value is stored only if the generation is still the one read (another
  script), and only if ``keep`` says so. A miss that is not kept leaves only
  its generation, which expires in seconds (``CLAIM_TTL_MS``): a key of the
  client's choice costs Redis nothing lasting;
* a write deletes the hashes of the keys it forgot, *after* its transaction
  commits (``after_commit``), before the writer's response leaves.

Why no write leaves a stale entry, however commits interleave. Take a value
stored under a key, computed from a snapshot taken after its generation was
read (each statement takes a fresh snapshot: READ COMMITTED on PostgreSQL,
autocommit reads on SQLite). A write that changes the key's rows either
committed before that snapshot (the value shows it), or committed after it,
so after the generation was read, and deletes the hash after its commit:
before the store, and the store finds no generation and keeps nothing; or
after it, and the value is gone. Each write evicts after its own commit and
relies on nothing about other writes, so commits out of id order do not
matter, and writers do not take turns. A generation that disappears for any
reason (eviction, TTL, Redis's ``maxmemory`` policy, a restart) refuses
the stores in flight, and tokens are random, so an old one never comes back.
The writer's next request starts after the eviction: read-your-writes on
every node, and everyone else sees the write as soon as it returns.

Two things the argument needs: a read's snapshot is not older than its
generation (so no REPEATABLE READ across a request), and a value read inside
a write that has not committed yet is never stored (it may roll back).

Entries live ``CACHE_TTL`` at most, so a writer that died between its commit
and its eviction leaves a stale entry for that long, no longer. In Redis,
give the cache ``maxmemory`` with ``volatile-lru`` (every key here has a
TTL): memory is then bounded in bytes too, and which keys Redis drops never
matters for correctness, by the argument above. Values are pickled: the
Redis must be trusted as the database is (whoever can write to it can run
code in the app).

When Redis cannot be reached (``CACHE_TIMEOUT_S``), reads go to the database
and keep nothing, and the process leaves Redis alone for ``CACHE_SYNC_INTERVAL``.
A write still commits; the keys it could not evict are *owed*: kept in the
process and appended to the ``cache_invalidations`` table (a short
transaction of its own). Every process, at least every ``CACHE_SYNC_INTERVAL``
and before it trusts Redis again after an outage, pays what is owed (deletes
those hashes, then those rows, by id, so writers need no ordering here
either). A stale entry therefore outlives Redis's return by at most
``CACHE_SYNC_INTERVAL``, whichever node wrote. If the table cannot be
written either and a process owes too many keys to remember, it drops the
whole prefix when Redis answers again.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import mmap
import operator
import os
import pickle
import secrets
import struct
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

import cachetools
from flask import Flask, current_app, g, session
from sqlalchemy import bindparam, delete, func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .extensions import db
from .models import CacheInvalidation, utcnow

# Log entries are kept this long; a process that has not replayed the log for
# half of it may have missed some, and drops its whole cache instead.
LOG_RETENTION = timedelta(minutes=10)
# Writes prune the log about once every this many log entries.
PRUNE_EVERY = 500
SESSION_KEY = "seen_write"
# The PostgreSQL advisory lock that writers of the invalidation log take in turn.
LOG_WRITERS_LOCK = 7170637
# Keys whose last eviction is remembered (a few dozen bytes each).
EVICTIONS_REMEMBERED = 100_000
# Keys a process may owe Redis in memory; past this it drops the whole prefix once Redis answers.
OWED_REMEMBERED = 10_000
# Owed evictions paid from the table per check (more wait for the next one).
OWED_PER_CHECK = 1000
# Built once on the table, as writes.py's statements are: every write sends the first, and every
# process the second after each write anywhere.
LOG = CacheInvalidation.__table__
LOG_KEYS = insert(LOG).returning(LOG.c.id)
LOGGED_AFTER = select(LOG.c.id, LOG.c.key).where(LOG.c.id > bindparam("applied")).order_by(LOG.c.id)
# Keys each cached read remembers how to spell (about 100 bytes each).
KEYS_SPELT = 20_000
# Which kept results each entry's eviction ends (``derived_from_keys``), at about 50 bytes a pair; past
# this many pairs, every such result is dropped and they start afresh.
DEPENDENCIES_REMEMBERED = 500_000

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class CacheKey(str):
    """The name of one cached entry, as only its read can make it (``read.key(...)``)."""


class ReadCache(Protocol):
    """What the app asks of a read cache."""

    enabled: bool
    # Whether a committed write is seen at once by every process (else within the staleness bound).
    fresh_everywhere: bool

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        """The value kept under ``key``, or ``compute()``'s, kept if ``keep`` says so and it is still valid."""

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        """``get_or_compute`` for each key at once; the value of ``keys[i]`` is computed by ``compute(i)``."""

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept under ``key`` for as long as ``inputs`` are the very values it was computed from."""

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        """The value of ``compute()``, which returns it with the keys of the entries it read, kept under ``key``
        until one of those entries is evicted (``CACHE_TTL`` at most)."""

    def forget(self, *keys: CacheKey) -> None:
        """Within a write's transaction: these keys are stale once it commits."""

    def patch(self, key: CacheKey, change: Callable[[Any], Any]) -> None:
        """``forget(key)``; but where this process can tell its entry held every earlier write, once the
        write commits the entry becomes ``change(entry)`` instead (unless that is None)."""

    def after_commit(self) -> None:
        """The write committed: drop what it forgot."""

    def after_rollback(self) -> None:
        """The write rolled back: forget nothing."""

    def sync(self, at_least: int | None = None) -> None:
        """Catch up with other processes' writes (all of them up to ``at_least``, if given)."""


@dataclass
class RequestState:
    """What one request knows about the cache: kept in ``g``, gone with the request."""

    # Evictions counted when the request's reads began (None: outside a request,
    # count from now): a value computed from rows read before a later eviction
    # of its key may be stale, and is not stored.
    epoch: int | None = None
    # Keys the open transaction has logged, and the first and last log ids it wrote.
    forgotten: list[str] = field(default_factory=list)
    forgotten_from: int | None = None
    forgotten_up_to: int | None = None
    # Entries to change rather than evict once the transaction commits (``patch``): key, change.
    patches: list[tuple[str, Callable[[Any], Any]]] = field(default_factory=list)
    # The last log id this request committed: the writer's next request replays up to it.
    committed_up_to: int | None = None


def request_state() -> RequestState:
    if "tweepy_cache" not in g:
        g.tweepy_cache = RequestState()
    return g.tweepy_cache


class NoCache:
    """Every read goes to the database; nothing to forget."""

    enabled = False
    fresh_everywhere = True

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return compute()

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        return [compute(i) for i in range(len(keys))]

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        return compute()

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        return compute()[0]

    def forget(self, *keys: CacheKey) -> None:
        pass

    def patch(self, key: CacheKey, change: Callable[[Any], Any]) -> None:
        pass

    def after_commit(self) -> None:
        pass

    def after_rollback(self) -> None:
        pass

    def sync(self, at_least: int | None = None) -> None:
        pass


def size_of(value: Any) -> int:
    """Bytes an entry holds, near enough: the value, its rows and their fields (keys are short by construction)."""
    size = sys.getsizeof(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        for item in value:
            size += size_of(item) if isinstance(item, tuple) else sys.getsizeof(item)
    return size


def result_size(kept: tuple | list) -> int:
    """Bytes a derived result holds of its own: the tuples, text or bytes it made (its rows and inputs are entries)."""
    inputs, value = kept[0], kept[1]
    size = sys.getsizeof(kept) + sys.getsizeof(inputs) + sys.getsizeof(value)
    if isinstance(value, tuple):  # a page in pieces (fragments.cut_at_holes), or rows (entries already)
        size += sum(sys.getsizeof(piece) for piece in value if isinstance(piece, (str, bytes)))
    return size


class WriteSignal:
    """A counter shared by every process on this host: a file of eight bytes, mapped into memory.

    Writers bump it (under a file lock: writes are few) once their transaction has committed;
    readers compare it with the value they last saw. Only a change matters, never its size, so a
    file left over from another database costs one needless catch-up, no more.
    """

    SIZE = struct.calcsize("Q")

    def __init__(self, path: str) -> None:
        self.descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if os.fstat(self.descriptor).st_size < self.SIZE:
            os.ftruncate(self.descriptor, self.SIZE)  # zeros; a second process doing the same changes nothing
        self.map = mmap.mmap(self.descriptor, self.SIZE)

    @classmethod
    def beside(cls, database_url: str) -> WriteSignal | None:
        """The signal of a SQLite database file (``<database>-writes``); None for other databases."""
        url = make_url(database_url)
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return cls(os.path.realpath(url.database) + "-writes")

    def value(self) -> int:
        # One aligned eight-byte load: a reader sees the old count or the new one.
        return struct.unpack_from("Q", self.map)[0]

    def bump(self) -> int:
        """Count one more write; returns the count it replaced."""
        fcntl.flock(self.descriptor, fcntl.LOCK_EX)
        try:
            before = self.value()
            struct.pack_into("Q", self.map, 0, before + 1)
            return before
        finally:
            fcntl.flock(self.descriptor, fcntl.LOCK_UN)


class LocalCache:
    """A per-process TTL cache, bounded in bytes, kept fresh by replaying the invalidation log."""

    enabled = True

    def __init__(self, max_bytes: int, ttl: float, sync_interval: float, signal: WriteSignal | None = None) -> None:
        # What was computed from entries (a timeline merged from its authors' pages, its HTML), each with the
        # entries it came from, gets an eighth of the budget; the entries themselves the rest.
        results_bytes = max_bytes // 8
        self.entries: cachetools.TTLCache = cachetools.TTLCache(
            maxsize=max_bytes - results_bytes, ttl=ttl, getsizeof=size_of
        )
        self.results: cachetools.LRUCache = cachetools.LRUCache(maxsize=results_bytes, getsizeof=result_size)
        # For each entry key, the results of ``derived_from_keys`` computed from it, which its eviction ends.
        self.dependents: dict[str, set[Hashable]] = {}
        self.dependencies = 0
        self.ttl = ttl
        # When each key was last evicted, counted in evictions: a read that began
        # before its key was evicted may hold stale rows and must not be stored.
        self.evicted_at: cachetools.TTLCache = cachetools.TTLCache(maxsize=EVICTIONS_REMEMBERED, ttl=max(ttl, 60))
        self.evictions = 0
        self.cleared_at = 0
        self.sync_interval = sync_interval
        self.applied: int | None = None  # last log id replayed here
        self.synced_at = 0.0
        # With a signal, every process sees a committed write at its next request; without,
        # other processes see it at their next sync, up to CACHE_SYNC_INTERVAL later.
        self.signal = signal
        self.fresh_everywhere = signal is not None
        self.signalled = None if signal is None else signal.value()  # the count this process has caught up with
        # uWSGI threads or gevent greenlets share this object; syncs must not interleave.
        self.lock = threading.RLock()

    def _reads_began(self) -> int:
        """Evictions counted when this request's reads began (outside a request: now)."""
        epoch = request_state().epoch
        return self.evictions if epoch is None else epoch

    def _none_evicted_since(self, epoch: int, keys: Iterable[str]) -> bool:
        """Whether neither a clearing nor an eviction of any of ``keys`` came after ``epoch`` (with the lock held)."""
        return self.evictions == epoch or (
            self.cleared_at <= epoch and all(self.evicted_at.get(key, -1) <= epoch for key in keys)
        )

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        try:
            return self.entries[key]
        except KeyError:
            pass
        epoch = self._reads_began()
        value = compute()
        if not keep(value):
            return value
        with self.lock:
            if self._none_evicted_since(epoch, (key,)):
                try:
                    self.entries[key] = value
                except ValueError:
                    pass  # larger than the whole cache: served, not kept
        return value

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        found = []
        for i, key in enumerate(keys):
            try:
                found.append(self.entries[key])
            except KeyError:
                found.append(self.get_or_compute(key, functools.partial(compute, i), keep))
        return found

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        """Entries are immutable and a stale one is replaced, never changed: while every input is the
        same object as before, the result is the same too. (It holds its inputs, so none of them is
        freed and its id given to another object.)

        A result equal to the one kept is returned as that very object, so what was derived from it
        in turn still stands: an author's page read again when its TTL ends, unchanged, leaves the
        timelines merged from it and the pages rendered from those as they were."""
        with self.lock:
            kept = self.results.get(key)
        if kept is not None and len(kept[0]) == len(inputs) and all(map(operator.is_, kept[0], inputs)):
            return kept[1]
        value = compute()
        if kept is not None and kept[1] == value:
            value = kept[1]
        with self.lock:
            try:
                self.results[key] = (inputs, value)
            except ValueError:
                pass  # larger than the whole store: served, not kept
        return value

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        """Kept as ``[keys, value, until]``; an eviction of any of ``keys`` sets ``until`` to the past
        (``_evict``), so a read while nothing it came from changed costs one lookup, however many
        entries it merged. Like ``derived``, a value equal to the one kept is returned as that object."""
        now = time.monotonic()
        with self.lock:
            kept = self.results.get(key)
        if kept is not None and now < kept[2]:
            return kept[1]
        epoch = self._reads_began()
        value, keys = compute()
        keys = tuple(keys)
        if kept is not None and kept[1] == value:
            value = kept[1]
        with self.lock:
            # An entry evicted since the request's reads began may have been read before its write: not kept.
            if not self._none_evicted_since(epoch, keys):
                return value
            try:
                self.results[key] = [keys, value, now + self.ttl]
            except ValueError:
                return value  # larger than the whole store: served, not kept
            if kept is not None:
                for gone in set(kept[0]).difference(keys):  # whom one no longer follows, say
                    dependents = self.dependents.get(gone, set())
                    self.dependencies -= key in dependents
                    dependents.discard(key)
            for k in keys:
                dependents = self.dependents.setdefault(k, set())
                self.dependencies += key not in dependents
                dependents.add(key)
            if self.dependencies > DEPENDENCIES_REMEMBERED:
                self._drop_dependents()
        return value

    def _drop_dependents(self) -> None:
        """End every result of ``derived_from_keys`` (they are computed again as asked) and what they depend on."""
        for dependents in self.dependents.values():
            for key in dependents:
                self.results.pop(key, None)
        self.dependents.clear()
        self.dependencies = 0

    def forget(self, *keys: CacheKey) -> None:
        """Log the keys in the current transaction; evict them here once it commits."""
        if not keys:
            return
        if db.session.get_bind().dialect.name == "postgresql":
            # sync() reads the log by id and assumes ids commit in order, as SQLite's single writer
            # guarantees. On PostgreSQL two writers could commit out of order and a process that
            # synced in between would skip the earlier id for good: writers of the log take turns.
            db.session.execute(text("SELECT pg_advisory_xact_lock(:lock)"), {"lock": LOG_WRITERS_LOCK})
        result = db.session.execute(LOG_KEYS, [{"key": key} for key in keys])
        ids = sorted(result.scalars())
        # Prune whenever this write's ids cross a multiple of PRUNE_EVERY, however many it logged.
        if ids[-1] // PRUNE_EVERY != (ids[0] - 1) // PRUNE_EVERY:
            prune_log()
        state = request_state()
        state.forgotten.extend(keys)
        if state.forgotten_from is None:
            state.forgotten_from = ids[0]
        state.forgotten_up_to = ids[-1]

    def patch(self, key: CacheKey, change: Callable[[Any], Any]) -> None:
        self.forget(key)
        request_state().patches.append((key, change))

    def after_commit(self) -> None:
        state = request_state()
        if state.forgotten:
            keys, state.forgotten = state.forgotten, []
            first, state.forgotten_from = state.forgotten_from, None
            state.committed_up_to, state.forgotten_up_to = state.forgotten_up_to, None
            patches, state.patches = state.patches, []
            with self.lock:
                # Ids commit in order, so when this write's entries follow the last one replayed here, no
                # one else's write lies between: every entry kept here held every write before this one.
                alone = self.applied is not None and self.applied + 1 == first
                entries = [(key, change, self.entries.get(key)) for key, change in patches] if alone else []
                changed = [(key, change(entry)) for key, change, entry in entries if entry is not None]
                self._evict(keys)
                for key, value in changed:
                    if value is not None:
                        try:
                            self.entries[key] = value
                        except ValueError:
                            pass  # larger than the whole cache: read again when asked for
                if alone:
                    # Replaying its entries would only evict again what was read or changed since.
                    self.applied = state.committed_up_to
                if self.signal is not None:
                    # Before the response leaves: every later request, in any process, catches up.
                    before = self.signal.bump()
                    if before == self.signalled:
                        self.signalled = before + 1  # only this write is new here, and it is evicted already

    def after_rollback(self) -> None:
        state = request_state()
        state.forgotten, state.forgotten_from, state.forgotten_up_to, state.patches = [], None, None, []

    def sync(self, at_least: int | None = None) -> None:
        now = time.monotonic()
        recent = self.applied is not None and now - self.synced_at < self.sync_interval
        signalled = None if self.signal is None else self.signal.value()
        if recent and (at_least is None or at_least <= self.applied) and signalled == self.signalled:
            return
        with self.lock:
            # Read before the log: whatever bumped it had committed, so the replay below includes it.
            self.signalled = signalled
            if self.applied is None or now - self.synced_at > LOG_RETENTION.total_seconds() / 2:
                # First sync, or asleep long enough to have missed pruned entries.
                self.applied = db.session.scalar(select(func.max(CacheInvalidation.id))) or 0
                self.entries.clear()
                self.results.clear()
                self.dependents.clear()
                self.dependencies = 0
                self.evictions += 1
                self.cleared_at = self.evictions
            else:
                # Ids commit in order (see forget), so whatever committed after `applied` is above it.
                logged = db.session.execute(LOGGED_AFTER, {"applied": self.applied}).all()
                if logged:
                    self._evict(row.key for row in logged)
                    self.applied = logged[-1].id
            self.synced_at = now

    def _evict(self, keys: Iterable[str]) -> None:
        self.evictions += 1
        for key in keys:
            self.entries.pop(key, None)
            self.evicted_at[key] = self.evictions
            dependents = self.dependents.pop(key, ())
            self.dependencies -= len(dependents)
            for dependent in dependents:
                kept = self.results.get(dependent)
                if kept is not None:
                    kept[2] = float("-inf")  # computed again when next asked for (its value kept to compare)


# How long the generation made by a miss lives, unless a value is stored with it. Short, because the key
# may be the client's choice (a name nobody has); a read that takes longer is served and not kept.
CLAIM_TTL_MS = 10_000
# A miss: the value if there is one, else the generation a store must still find (made if there is none).
VALUE_OR_GENERATION = """
local found = redis.call('HMGET', KEYS[1], 'value', 'generation')
if found[1] then return {1, found[1]} end
if found[2] then return {0, found[2]} end
redis.call('HSET', KEYS[1], 'generation', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, ARGV[1]}
"""
# A store: only if no write evicted the key since its generation was read.
STORE_IF_UNCHANGED = """
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class RedisCache:
    """One cache in Redis for every process of every node; see the module docstring for why it stays fresh."""

    enabled = True
    # Every process reads the one copy, evicted as soon as a write commits.
    fresh_everywhere = True

    def __init__(self, url: str, prefix: str, ttl: float, timeout: float, sync_interval: float) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # One retry, at once: a pooled connection that a Redis restart closed is replaced, no more.
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1)
        )
        self.unreachable = (redis.ConnectionError, redis.TimeoutError, OSError)
        self.failed = (redis.RedisError, OSError)
        self.value_or_generation = self.client.register_script(VALUE_OR_GENERATION)
        self.store_if_unchanged = self.client.register_script(STORE_IF_UNCHANGED)
        self.prefix = prefix
        self.ttl_ms = max(1, int(ttl * 1000))
        self.sync_interval = sync_interval
        # Until Redis is known to owe nothing (at start: a process that died may have left debts),
        # reads do not use it.
        self.trusted = False
        self.unreachable_until = 0.0
        self.checked_at = float("-inf")
        self.owed: set[str] = set()
        self.owe_everything = False
        self.lock = threading.Lock()
        # One thread or greenlet of the process pays debts at a time; the others carry on.
        self.paying = threading.Lock()

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return self.get_many_or_compute([key], lambda _: compute(), keep)[0]

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        """One round trip for all the keys (and one more to store the misses worth keeping)."""
        if not self.trusted:
            self.pay_debts()
            if not self.trusted:
                return [compute(i) for i in range(len(keys))]
        names = [self.prefix + key for key in keys]
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for name in names:
                    self.value_or_generation(keys=[name], args=[secrets.token_hex(8), CLAIM_TTL_MS], client=pipe)
                replies = pipe.execute()
        except self.unreachable as error:
            self._lost(error)
            return [compute(i) for i in range(len(keys))]
        except self.failed as error:  # out of memory under maxmemory noeviction, say: served, nothing kept
            log.warning("read cache: Redis refused to read %s: %s", ", ".join(keys), error)
            return [compute(i) for i in range(len(keys))]
        values, stores = [], []
        # A value read inside a write that has not committed may show rows that roll back.
        storing = not request_state().forgotten
        for i, (found, payload) in enumerate(replies):
            if found:
                try:
                    values.append(pickle.loads(payload))
                    continue
                except Exception:  # an entry that code deployed since cannot read: drop it, read again
                    log.warning("read cache: cannot read the entry of %s; dropping it", keys[i])
                    self.evict([keys[i]])
                    values.append(compute(i))
                    continue
            value = compute(i)
            values.append(value)
            if storing and keep(value):
                stores.append((names[i], payload, pickle.dumps(value, pickle.HIGHEST_PROTOCOL)))
        if stores:
            self._store(stores)
        return values

    def _store(self, stores: list[tuple[str, bytes, bytes]]) -> None:
        """Keep each (name, generation read, value), each only if its generation is unchanged."""
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for name, generation, value in stores:
                    self.store_if_unchanged(keys=[name], args=[generation, value, self.ttl_ms], client=pipe)
                pipe.execute()
        except self.unreachable as error:
            self._lost(error)
        except self.failed as error:  # out of memory under maxmemory noeviction: served, not kept
            log.warning("read cache: Redis refused to keep %s: %s", ", ".join(name for name, _, _ in stores), error)

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        # Every read unpickles new values: nothing computed from them is ever the same twice.
        return compute()

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        # Another process's write evicts in Redis only: nothing here would hear of it.
        return compute()[0]

    def forget(self, *keys: CacheKey) -> None:
        """Remember the keys; they are evicted once the transaction commits (evicting sooner would let a
        read fill them again from rows the write has not committed yet)."""
        request_state().forgotten.extend(keys)

    def patch(self, key: CacheKey, change: Callable[[Any], Any]) -> None:
        # Another node may have written in between, unseen from here: only a read can tell.
        self.forget(key)

    def after_commit(self) -> None:
        state = request_state()
        if state.forgotten:
            keys, state.forgotten = state.forgotten, []
            self.evict(keys)

    def after_rollback(self) -> None:
        request_state().forgotten = []

    def sync(self, at_least: int | None = None) -> None:
        """Pay the evictions anyone owes Redis, at least every ``CACHE_SYNC_INTERVAL`` (writers need nothing more)."""
        if time.monotonic() - self.checked_at >= self.sync_interval:
            self.pay_debts()

    def evict(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if time.monotonic() >= self.unreachable_until:
            try:
                self.client.delete(*(self.prefix + key for key in keys))
                return
            except self.failed as error:  # a timeout may have deleted them or not: they are owed either way
                self._lost(error)
        self._owe(keys)

    def pay_debts(self) -> None:
        """Evict what this process and the table say is owed; then Redis can be trusted again."""
        if time.monotonic() < self.unreachable_until or not self.paying.acquire(blocking=False):
            return
        try:
            self.checked_at = time.monotonic()
            with self.lock:
                owed, everything = set(self.owed), self.owe_everything
            if everything:
                self.drop_everything()
            elif owed:
                self.client.delete(*(self.prefix + key for key in owed))
            # A connection of its own: this may run inside a request's transaction, which must stay its own.
            with db.engine.begin() as connection:
                rows = connection.execute(
                    select(CacheInvalidation.id, CacheInvalidation.key)
                    .order_by(CacheInvalidation.id)
                    .limit(OWED_PER_CHECK)
                ).all()
                if rows:
                    self.client.delete(*{self.prefix + row.key for row in rows})
                    connection.execute(
                        delete(CacheInvalidation).where(CacheInvalidation.id.in_([row.id for row in rows]))
                    )
            with self.lock:
                self.owed -= owed
                self.owe_everything &= not everything
            if len(rows) == OWED_PER_CHECK:
                self.checked_at = float("-inf")  # more to pay: at the next request
            if not self.trusted:
                log.warning("read cache: Redis answers and is owed nothing; using it again")
            self.trusted = True
        except self.failed as error:
            self._lost(error)
        except SQLAlchemyError as error:
            # Whatever is owed cannot be read: Redis may hold stale entries, so reads keep off it.
            log.warning("read cache: cannot read the evictions owed to Redis: %s", error)
            self.trusted = False
        finally:
            self.paying.release()

    def drop_everything(self) -> None:
        """Delete every key under the prefix (and only those: the Redis may be shared)."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix) + "*"
        batch = []
        for name in self.client.scan_iter(match=pattern, count=1000):
            batch.append(name)
            if len(batch) == 1000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)

    def _lost(self, error: Exception) -> None:
        if self.trusted:
            log.warning("read cache: Redis unreachable (%s); serving from the database", error)
        self.trusted = False
        self.unreachable_until = time.monotonic() + self.sync_interval

    def _owe(self, keys: list[str]) -> None:
        with self.lock:
            self.owed.update(keys)
            if len(self.owed) > OWED_REMEMBERED:
                self.owed.clear()
                self.owe_everything = True
        try:
            with db.engine.begin() as connection:
                connection.execute(insert(CacheInvalidation), [{"key": key} for key in keys])
        except SQLAlchemyError as error:
            log.warning("read cache: cannot record evictions owed to Redis (this process still owes them): %s", error)


def prune_log() -> None:
    """Drop log entries nobody can still need (called now and then by writes)."""
    db.session.execute(delete(CacheInvalidation).where(CacheInvalidation.created < utcnow() - LOG_RETENTION))


def cache() -> ReadCache:
    return current_app.extensions["tweepy_cache"]


class CachedRead(Generic[P, R]):
    """A read whose results are kept under keys it names itself.

    ``canonical`` maps the read's arguments to the ones that identify a result
    (``"Bob"`` and ``"bob"`` name the same user), for the call and the key alike.
    """

    def __init__(
        self,
        name: str,
        read: Callable[P, R],
        canonical: Callable[..., tuple] | None = None,
        keep: Callable[[R], bool] | None = None,
    ) -> None:
        self.name = name
        self.uncached = read
        self.canonical = canonical or (lambda *args: args)
        # A miss is not kept: its key is whatever the client asked for, and
        # keeping every miss would let anyone fill the cache.
        self.keep = keep or (lambda value: value is not None)
        # A timeline asks for twenty-odd keys a request: each is spelt once, then looked up.
        self._key_of = functools.lru_cache(maxsize=KEYS_SPELT)(self._spell)
        functools.update_wrapper(self, read)

    def key(self, *args: Hashable) -> CacheKey:
        return self._key_of(self.canonical(*args))

    def _spell(self, canonical: tuple) -> CacheKey:
        return CacheKey(":".join((self.name, *map(str, canonical))))

    def __call__(self, *args: Hashable) -> R:
        canonical = self.canonical(*args)
        return cache().get_or_compute(self._key_of(canonical), lambda: self.uncached(*canonical), self.keep)

    def many(self, calls: Iterable[tuple]) -> list[R]:
        """The results of several calls (each a tuple of arguments), asked of the cache at once."""
        canonical = [self.canonical(*args) for args in calls]
        keys = [self._key_of(args) for args in canonical]
        return cache().get_many_or_compute(keys, lambda i: self.uncached(*canonical[i]), self.keep)

    def __repr__(self) -> str:
        return f"<cached read {self.name}>"


# Every cached read, by name: the tests check each one is forgotten by the writes that change it.
READS: dict[str, CachedRead] = {}


def memoized(
    name: str, canonical: Callable[..., tuple] | None = None, keep: Callable[[Any], bool] | None = None
) -> Callable[[Callable[P, R]], CachedRead[P, R]]:
    """Cache a read under keys ``name:arg1:arg2``; ``read.key(...)`` names them for ``forget``.

    ``canonical`` maps arguments to the ones that identify a result; ``keep``
    says which results are worth keeping (by default, anything but None).
    """

    def decorate(read: Callable[P, R]) -> CachedRead[P, R]:
        if name in READS:
            raise ValueError(f"two cached reads are named {name!r}")
        READS[name] = CachedRead(name, read, canonical, keep)
        return READS[name]

    return decorate


def forget(*keys: CacheKey) -> None:
    """Within a write's transaction: the entries under these keys are stale once it commits."""
    for key in keys:
        if not isinstance(key, CacheKey):
            raise TypeError(f"forget() takes keys made by a cached read's .key(), not {key!r}")
    cache().forget(*keys)


def patch(key: CacheKey, change: Callable[[Any], Any]) -> None:
    """``forget(key)``, and where the cache can tell its entry is current, ``change(entry)`` in its place
    (``change`` returns what a read would now, or None when it cannot tell)."""
    if not isinstance(key, CacheKey):
        raise TypeError(f"patch() takes a key made by a cached read's .key(), not {key!r}")
    cache().patch(key, change)


def init_app(app: Flask) -> None:
    if app.config["CACHE"] == "local":
        signal = WriteSignal.beside(app.config["DATABASE_URL"]) if app.config["CACHE_WRITE_SIGNAL"] else None
        backend = LocalCache(
            app.config["CACHE_BYTES"], app.config["CACHE_TTL"], app.config["CACHE_SYNC_INTERVAL"], signal
        )
    elif app.config["CACHE"] == "redis":
        backend = RedisCache(
            app.config["CACHE_URL"],
            app.config["CACHE_KEY_PREFIX"],
            app.config["CACHE_TTL"],
            app.config["CACHE_TIMEOUT_S"],
            app.config["CACHE_SYNC_INTERVAL"],
        )
    else:
        backend = NoCache()
    app.extensions["tweepy_cache"] = backend
    if not backend.enabled:
        return

    @app.before_request
    def catch_up_with_other_processes() -> None:
        backend.sync(at_least=session.get(SESSION_KEY))
        if isinstance(backend, LocalCache):
            # This request's reads all come after the sync, so they may fill what it
            # evicted; a key evicted after this point was changed under them, and is not stored.
            request_state().epoch = backend.evictions

    @app.after_request
    def remember_own_writes(response):
        # The writer's next request, wherever it lands, replays up to here first (a signal
        # already makes every process do so).
        if backend.fresh_everywhere:
            return response
        if "tweepy_cache" in g and g.tweepy_cache.committed_up_to is not None:
            session[SESSION_KEY] = g.tweepy_cache.committed_up_to
        return response
