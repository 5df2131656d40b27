"""What every cache backend offers the app (``ReadCache``), what one request knows about it, and ``NoCache``.

The backends themselves live in ``local.py`` and ``redis_cache.py``; why they never serve a stale
entry is in docs/caching.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from flask import current_app, g
from sqlalchemy.sql import Executable

from ..extensions import db


class CacheKey(str):
    """The name of one cached entry, as only its read can make it (``read.key(...)``)."""


class ReadCache(Protocol):
    """What the app asks of a read cache."""

    enabled: bool
    # Whether a committed write is seen at once by every process (else within the staleness bound).
    fresh_everywhere: bool
    # Whether ``change`` is one statement that commits by itself, needing no transaction around it.
    changes_commit_alone: bool

    def begin_request(self, seen_write: int | None) -> None:
        """Before a request's reads: catch up with other processes' writes, all of them up to
        ``seen_write`` (the last log id the requester's own writes reached), if given."""

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        """The value kept under ``key``, or ``compute()``'s, kept if ``keep`` says so and it is still valid."""

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        """``get_or_compute`` for each key at once; the value of ``keys[i]`` is computed by ``compute(i)``."""

    def get_at_once_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        """``get_or_compute``, from a copy that every process sees a write evict at once (else the database)."""

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept under ``key`` for as long as ``inputs`` are the very values it was computed from."""

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        """The value of ``compute()``, which returns it with the keys of the entries it read, kept under ``key``
        until one of those entries is evicted (``CACHE_TTL`` at most)."""

    def forget(self, *keys: CacheKey) -> None:
        """Within a write's transaction: these keys are stale once it commits."""

    def patch(self, patch: Patch, row: tuple) -> None:
        """``forget(patch.key)``; but where this process can tell its entry held every earlier write, once the
        write commits the entry becomes ``patch.change(entry, row)`` instead (unless that is None)."""

    def change(
        self,
        statement: Executable,
        params: dict[str, Any],
        forgets: tuple[CacheKey, ...] = (),
        patch: Patch | None = None,
    ) -> tuple | None:
        """Within a write's transaction: run ``statement``, which changes at most one row and returns it; if it
        changed one, ``forget`` the keys ``forgets`` and ``patch`` ``patch.key``, whose ``change`` is given
        the entry and the row. The row, or None."""

    def after_commit(self) -> None:
        """The write committed: drop what it forgot."""

    def after_rollback(self) -> None:
        """The write rolled back: forget nothing."""

    def sync(self, at_least: int | None = None) -> None:
        """Catch up with other processes' writes (all of them up to ``at_least``, if given)."""


@dataclass
class Patch:
    """An entry a write changes rather than evicts once it commits (``ReadCache.patch``, ``ReadCache.change``)."""

    key: CacheKey
    change: Callable[[Any, tuple], Any]  # (the entry, the row the write changed) -> the new entry, or None


class ChangesThenForgets:
    """``ReadCache.change`` as two steps of the open transaction: the statement, then what it makes stale."""

    changes_commit_alone = False

    def change(
        self,
        statement: Executable,
        params: dict[str, Any],
        forgets: tuple[CacheKey, ...] = (),
        patch: Patch | None = None,
    ) -> tuple | None:
        row = db.session.execute(statement, params).first()
        if row is None:
            return None
        row = tuple(row)
        self.forget(*forgets)
        if patch is not None:
            self.patch(patch, row)
        return row


@dataclass
class RequestState:
    """What one request knows about the cache: kept in ``g``, gone with the request."""

    # Evictions counted when the request's reads began (None: outside a request,
    # count from now): a value computed from rows read before a later eviction
    # of its key may be stale, and is not stored.
    epoch: int | None = None
    # The last log id replayed when the request's reads began: every write logged up to it committed
    # before them, so what they compute shows it (a near cache stamps what it gives Redis with it).
    stamp: int | None = None
    # Keys the open transaction has logged, and the first and last log ids it wrote.
    forgotten: list[str] = field(default_factory=list)
    forgotten_from: int | None = None
    forgotten_up_to: int | None = None
    # Entries to change rather than evict once the transaction commits.
    patches: list[tuple[Patch, tuple]] = field(default_factory=list)  # each with the row its write changed
    # The last log id this request committed: the writer's next request replays up to it.
    committed_up_to: int | None = None


def request_state() -> RequestState:
    if "tweepy_cache" not in g:
        g.tweepy_cache = RequestState()
    return g.tweepy_cache


def cache() -> ReadCache:
    """The app's read cache (the backend ``CACHE`` chose)."""
    return current_app.extensions["tweepy_cache"]


class NoCache(ChangesThenForgets):
    """Every read goes to the database; nothing to forget."""

    enabled = False
    fresh_everywhere = True

    def begin_request(self, seen_write: int | None) -> None:
        pass

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return compute()

    def get_many_or_compute(
        self, keys: list[CacheKey], compute: Callable[[int], Any], keep: Callable[[Any], bool]
    ) -> list[Any]:
        return [compute(i) for i in range(len(keys))]

    def get_at_once_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return compute()

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        return compute()

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        return compute()[0]

    def forget(self, *keys: CacheKey) -> None:
        pass

    def patch(self, patch: Patch, row: tuple) -> None:
        pass

    def after_commit(self) -> None:
        pass

    def after_rollback(self) -> None:
        pass

    def sync(self, at_least: int | None = None) -> None:
        pass
