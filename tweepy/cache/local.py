"""``LocalCache`` (``CACHE=local``): each process keeps its own entries, fresh by replaying the invalidation log.

A write logs the keys it forgets in the ``cache_invalidations`` table, in its own transaction, and
evicts them here once it commits; every other process replays the log at least every
``CACHE_SYNC_INTERVAL``, and at once when the requester wrote something it has not replayed yet (or
when the ``WriteSignal`` moved). What is computed from entries is kept by ``derived`` and
``derived_from_keys``. Why this never serves a stale entry: docs/caching.md.
"""

from __future__ import annotations

import functools
import operator
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import cachetools
from sqlalchemy.sql import Executable

from . import log
from .backend import CacheKey, ChangesThenForgets, Patch, request_state
from .write_signal import WriteSignal

# Keys whose last eviction is remembered (a few dozen bytes each).
EVICTIONS_REMEMBERED = 100_000
# Which kept results each entry's eviction ends (``derived_from_keys``), at about 50 bytes a pair; past
# this many pairs, every such result is dropped and they start afresh.
DEPENDENCIES_REMEMBERED = 500_000


def size_of(value: Any) -> int:
    """Bytes an entry holds, near enough: the value, its rows and their fields (keys are short by construction)."""
    size = sys.getsizeof(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        for item in value:
            size += size_of(item) if isinstance(item, tuple) else sys.getsizeof(item)
    return size


def own_size(value: Any) -> int:
    """Bytes of a derived value that are its own: the tuples, text or bytes it made (its rows are entries)."""
    size = sys.getsizeof(value)
    if isinstance(value, tuple):  # a page in pieces (fragments.cut_at_holes), or rows (entries already)
        size += sum(sys.getsizeof(piece) for piece in value if isinstance(piece, (str, bytes)))
    return size


@dataclass(slots=True)
class Derived:
    """A result of ``derived``: it stands while ``inputs`` are the very objects it was computed from."""

    inputs: tuple
    value: Any

    def size(self) -> int:
        return sys.getsizeof(self) + sys.getsizeof(self.inputs) + own_size(self.value)


@dataclass(slots=True)
class DerivedFromKeys:
    """A result of ``derived_from_keys``: it stands until ``until``, which the eviction of any of ``keys``
    moves to the past (its value is kept, to be compared with the next one)."""

    keys: tuple
    value: Any
    until: float

    def size(self) -> int:
        return sys.getsizeof(self) + sys.getsizeof(self.keys) + own_size(self.value)


class LocalCache(ChangesThenForgets):
    """A per-process TTL cache, bounded in bytes, kept fresh by replaying the invalidation log."""

    enabled = True

    def __init__(
        self,
        max_bytes: int,
        ttl: float,
        sync_interval: float,
        signal: WriteSignal | None = None,
        changes_commit_alone: bool = False,
    ) -> None:
        # What was computed from entries (a timeline merged from its authors' pages, its HTML) gets an
        # eighth of the budget; the entries themselves the rest.
        results_bytes = max_bytes // 8
        self.entries: cachetools.TTLCache = cachetools.TTLCache(
            maxsize=max_bytes - results_bytes, ttl=ttl, getsizeof=size_of
        )
        self.results: cachetools.LRUCache = cachetools.LRUCache(
            maxsize=results_bytes, getsizeof=operator.methodcaller("size")
        )
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
        # On PostgreSQL where reads autocommit: a change and its log entries are one statement, one round
        # trip, where a transaction would be four (BEGIN, the change, the log, COMMIT).
        self.changes_commit_alone = changes_commit_alone

    def begin_request(self, seen_write: int | None) -> None:
        self.sync(at_least=seen_write)
        # This request's reads all come after the sync, so they may fill what it
        # evicted; a key evicted after this point was changed under them, and is not stored.
        state = request_state()
        state.epoch = self.evictions
        state.stamp = self.applied

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

    def get_at_once_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        # Only the signal makes every process see a write at its next request.
        return compute() if self.signal is None else self.get_or_compute(key, compute, keep)

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        """Entries are immutable and a stale one is replaced, never changed: while every input is the
        same object as before, the result is the same too. (It holds its inputs, so none of them is
        freed and its id given to another object.)

        A result equal to the one kept is returned as that very object, so what was derived from it
        in turn still stands: an author's page read again when its TTL ends, unchanged, leaves the
        timelines merged from it and the pages rendered from those as they were."""
        with self.lock:
            kept = self.results.get(key)
        if kept is not None and len(kept.inputs) == len(inputs) and all(map(operator.is_, kept.inputs, inputs)):
            return kept.value
        value = compute()
        if kept is not None and kept.value == value:
            value = kept.value
        with self.lock:
            try:
                self.results[key] = Derived(inputs, value)
            except ValueError:
                pass  # larger than the whole store: served, not kept
        return value

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        """An eviction of any of the keys it read ends the result (``_evict``), so a read while nothing it
        came from changed costs one lookup, however many entries it merged. Like ``derived``, a value equal
        to the one kept is returned as that object."""
        now = time.monotonic()
        with self.lock:
            kept = self.results.get(key)
        if kept is not None and now < kept.until:
            return kept.value
        epoch = self._reads_began()
        value, keys = compute()
        keys = tuple(keys)
        if kept is not None and kept.value == value:
            value = kept.value
        with self.lock:
            # An entry evicted since the request's reads began may have been read before its write: not kept.
            if not self._none_evicted_since(epoch, keys):
                return value
            try:
                self.results[key] = DerivedFromKeys(keys, value, now + self.ttl)
            except ValueError:
                return value  # larger than the whole store: served, not kept
            if kept is not None:
                for gone in set(kept.keys).difference(keys):  # whom one no longer follows, say
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
        if keys:
            self._logged(keys, log.log_keys(keys))

    def _logged(self, keys: Iterable[CacheKey], ids: list[int]) -> None:
        """The write logged ``keys`` under ``ids`` (in order): evicted once it commits."""
        state = request_state()
        state.forgotten.extend(keys)
        if state.forgotten_from is None:
            state.forgotten_from = ids[0]
        state.forgotten_up_to = ids[-1]

    def patch(self, patch: Patch, row: tuple) -> None:
        self.forget(patch.key)
        request_state().patches.append((patch, row))

    def change(
        self,
        statement: Executable,
        params: dict[str, Any],
        forgets: tuple[CacheKey, ...] = (),
        patch: Patch | None = None,
    ) -> tuple | None:
        if not self.changes_commit_alone:
            return super().change(statement, params, forgets, patch)
        keys = [*forgets, *([patch.key] if patch is not None else [])]
        changed = log.change_and_log_keys(statement, params, keys)
        if changed is None:
            return None
        row, ids = changed
        self._logged(keys, ids)
        if patch is not None:
            request_state().patches.append((patch, row))
        return row

    def after_commit(self) -> None:
        self._commit()

    def _commit(self) -> dict[str, Any]:
        """Evict what the committed write forgot, and change what it patched where this process can tell its
        entry held every earlier write; the entries so changed, by key."""
        state = request_state()
        changed: list[tuple[str, Any]] = []
        if state.forgotten:
            keys, state.forgotten = state.forgotten, []
            first, state.forgotten_from = state.forgotten_from, None
            state.committed_up_to, state.forgotten_up_to = state.forgotten_up_to, None
            patches, state.patches = state.patches, []
            with self.lock:
                # Ids commit in order, so when this write's entries follow the last one replayed here, no
                # one else's write lies between: every entry kept here held every write before this one.
                alone = self.applied is not None and self.applied + 1 == first
                held = [(patch, row, self.entries.get(patch.key)) for patch, row in patches] if alone else []
                changed = [(patch.key, patch.change(entry, row)) for patch, row, entry in held if entry is not None]
                self._evict(keys, [state.committed_up_to] * len(keys))
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
        return {key: value for key, value in changed if value is not None}

    def after_rollback(self) -> None:
        state = request_state()
        state.forgotten, state.forgotten_from, state.forgotten_up_to, state.patches = [], None, None, []

    def sync(self, at_least: int | None = None) -> None:
        now = time.monotonic()
        recent = self.applied is not None and now - self.synced_at < self.sync_interval
        signalled = None if self.signal is None else self.signal.value()
        if recent and (at_least is None or at_least <= self.applied) and signalled == self.signalled:
            return
        # The log is read with no lock held: a greenlet waiting on the lock may hold the pool's last
        # database connection, which the read would then wait for until the pool gives up.
        logged = None
        if self.applied is None or now - self.synced_at > log.LOG_RETENTION.total_seconds() / 2:
            # First sync, or asleep long enough to have missed pruned entries.
            newest = log.newest_id()
        else:
            logged = log.logged_after(self.applied)
        with self.lock:
            if logged is None:
                self.applied = max(newest, self.applied or 0)
                self._clear()
            else:
                # Another greenlet may have replayed some of them, or this process written them, meanwhile.
                logged = [row for row in logged if row.id > self.applied]
                if logged:
                    self._evict([row.key for row in logged], [row.id for row in logged])
                    self.applied = logged[-1].id
            # Read before the log: whatever bumped it had committed, so the replay above includes it.
            self.signalled = signalled
            self.synced_at = now

    def _clear(self) -> None:
        """Drop every entry and every result (with the lock held)."""
        self.entries.clear()
        self.results.clear()
        self.dependents.clear()
        self.dependencies = 0
        self.evictions += 1
        self.cleared_at = self.evictions

    def _evict(self, keys: Iterable[str], logged: Iterable[int] = ()) -> None:
        """Evict ``keys``; ``logged`` gives, key by key, the log id of the write that made it stale (if known)."""
        self.evictions += 1
        for key in keys:
            self.entries.pop(key, None)
            self.evicted_at[key] = self.evictions
            dependents = self.dependents.pop(key, ())
            self.dependencies -= len(dependents)
            for dependent in dependents:
                kept = self.results.get(dependent)
                if kept is not None:
                    kept.until = float("-inf")  # computed again when next asked for (its value kept to compare)
