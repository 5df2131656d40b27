"""``NearCache`` (``CACHE=redis`` with ``CACHE_NEAR``): a ``LocalCache`` in each process, in front of Redis.

A read found in the process costs what it costs with ``CACHE=local``; a miss asks Redis (``RedisCache``,
one round trip for all the keys it lacks), then the database. Each process keeps its entries fresh as
``LocalCache`` does, by replaying the invalidation log (in the database); each value Redis keeps is
stamped with the last log id its reader had replayed, and a value stamped before an eviction replayed
here is read afresh, so an eviction Redis missed (a lost delete, a writer cut off) leaves nothing stale
once the log is replayed. A read every process must see evicted at once (who is logged in) is kept here
only with ``CACHE_NEAR_SESSIONS``, where Redis pushes the name of each such key anyone changes
(``tracking.py``), and trusted only once every name pushed so far is evicted. Why: docs/caching.md and
stages/7-scale-out/README.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import cachetools

from .backend import CacheKey, request_state
from .keys import seen_at_once
from .local import LocalCache
from .redis_cache import RedisCache
from .tracking import EVERYTHING, Invalidations

# Keys whose last eviction's log id is remembered (a few dozen bytes each); past this many, the highest
# of them stands for all.
EVICTIONS_REMEMBERED = 100_000
# Entries read at once (sessions, a few hundred bytes each) kept in the process.
AT_ONCE_KEPT = 100_000


class NearCache(LocalCache):
    """Entries kept in the process, fresh by the log; misses read through ``far``, shared by every node."""

    def __init__(
        self,
        far: RedisCache,
        max_bytes: int,
        ttl: float,
        sync_interval: float,
        sessions_near: bool = False,
        changes_commit_alone: bool = False,
    ) -> None:
        super().__init__(max_bytes, ttl, sync_interval, changes_commit_alone=changes_commit_alone)
        self.far = far
        # What must be seen evicted at once everywhere (who is logged in), kept here only while Redis pushes
        # every change of it; without ``sessions_near`` it is always read from Redis.
        self.at_once: cachetools.TTLCache = cachetools.TTLCache(maxsize=AT_ONCE_KEPT, ttl=ttl)
        self.pushed = (
            Invalidations(far.url, self._tracked_prefixes, far.timeout, sync_interval) if sessions_near else None
        )
        # Counts the changes pushed and applied here: a value read from Redis before one of them is not kept.
        self.pushes_applied = 0
        # For each key, the log id of its last eviction here: a value from Redis stamped below it is older.
        self.evicted_by: dict[str, int] = {}
        # What a key missing from ``evicted_by`` may have been evicted by: nothing known before the first
        # sync, everything logged before it after.
        self.floor = 0

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        try:
            return self.entries[key]
        except KeyError:
            pass
        return self._through_far([key], lambda _: compute(), keep)[0]

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        """The entries found here, and every other one in a single round trip to Redis."""
        found: list[Any] = []
        missing: list[int] = []
        for i, key in enumerate(keys):
            try:
                found.append(self.entries[key])
            except KeyError:
                found.append(None)
                missing.append(i)
        if missing:
            values = self._through_far([keys[i] for i in missing], lambda j: compute(missing[j]), keep)
            for i, value in zip(missing, values, strict=True):
                found[i] = value
        return found

    def get_at_once_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        if self.pushed is not None:
            with self.lock:
                if self._apply_pushed():
                    try:
                        return self.at_once[key]
                    except KeyError:
                        pass
                before = self.pushes_applied
        # Redis is evicted before the writer answers; its stamp guards against a delete it missed.
        value = self.far.get_many_or_compute([key], lambda _: compute(), keep, *self._stamps([key]))[0]
        if self.pushed is not None and keep(value):
            with self.lock:
                # Every change made after Redis answered will be pushed, and evict what is kept now; one
                # pushed and applied in the meantime (by another greenlet) would not.
                if self._apply_pushed() and self.pushes_applied == before:
                    self.at_once[key] = value
        return value

    def _apply_pushed(self) -> bool:
        """Evict what Redis pushed since last asked (with the lock held); whether it pushes every change now."""
        changed = self.pushed.changed()
        if changed is EVERYTHING:
            self.at_once.clear()
            self.pushes_applied += 1
        elif changed:
            start = len(self.far.prefix)
            for name in changed:
                self.at_once.pop(name[start:], None)
            self.pushes_applied += 1
        return self.pushed.watching

    def _tracked_prefixes(self) -> list[str]:
        return [f"{self.far.prefix}{name}:" for name in sorted(seen_at_once())]

    def _stamps(self, keys: list[CacheKey]) -> tuple[int, list[int]]:
        """The stamp a value computed now gets, and the least stamp each key's value in Redis must have."""
        stamp = request_state().stamp
        with self.lock:
            wanted = [self.evicted_by.get(key, self.floor) for key in keys]
            return (self.applied or 0) if stamp is None else stamp, wanted

    def _through_far(self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]) -> list:
        epoch = self._reads_began()
        values = self.far.get_many_or_compute(keys, compute, keep, *self._stamps(keys))
        with self.lock:
            for key, value in zip(keys, values, strict=True):
                # Whatever Redis gave is as new as the last eviction replayed here; one replayed since
                # the request's reads began may be newer.
                if keep(value) and self._none_evicted_since(epoch, (key,)):
                    try:
                        self.entries[key] = value
                    except ValueError:
                        pass  # larger than the whole cache: served, not kept
        return values

    def after_commit(self) -> None:
        state = request_state()
        keys, stamp = list(state.forgotten), state.forgotten_up_to
        changed = self._commit()
        if keys:
            # Before the response leaves, as RedisCache does. An entry this process changed in place is
            # given to Redis too, stamped with this write: other nodes read it rather than the database.
            self.far.replace({key: changed.get(key) for key in keys}, stamp)

    def sync(self, at_least: int | None = None) -> None:
        super().sync(at_least)
        self.far.sync()

    def _clear(self) -> None:
        super()._clear()
        self.at_once.clear()
        self.evicted_by.clear()
        self.floor = self.applied or 0

    def _evict(self, keys: Iterable[str], logged: Iterable[int] = ()) -> None:
        keys, logged = list(keys), list(logged)
        super()._evict(keys, logged)
        for key in keys:  # a change Redis did not push (its delete was lost) ends here once replayed
            self.at_once.pop(key, None)
        # Where not known, only the writes up to the last one replayed can have made a key stale.
        logged += [self.applied or 0] * (len(keys) - len(logged))
        for key, log_id in zip(keys, logged, strict=True):
            self.evicted_by[key] = max(log_id, self.evicted_by.get(key, 0))
        if len(self.evicted_by) > EVICTIONS_REMEMBERED:
            self.floor = max(self.floor, *self.evicted_by.values())
            self.evicted_by.clear()
