"""Cached reads and the keys they name: ``memoized`` makes a read cached, ``forget`` and ``change`` take its keys.

A read owns the name of its entries (``queries.newest_tweets_by.key(author_id)``), and ``forget`` takes
nothing else (nor does ``change``), so a write cannot forget a key that no read uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar

from sqlalchemy.sql import Executable

from .backend import CacheKey, Patch, cache

# Keys each cached read remembers how to spell (about 100 bytes each).
KEYS_SPELT = 20_000

P = ParamSpec("P")
R = TypeVar("R")


class CachedRead(Generic[P, R]):
    """A read whose results are kept under keys it names itself.

    ``canonical`` maps the read's arguments to the ones that identify a result
    (``"Bob"`` and ``"bob"`` name the same user), for the call and the key alike. A read ``at_once``
    is served only from a copy that every process sees a write evict at once.
    """

    def __init__(
        self,
        name: str,
        read: Callable[P, R],
        canonical: Callable[..., tuple] | None = None,
        keep: Callable[[R], bool] | None = None,
        at_once: bool = False,
    ) -> None:
        self.name = name
        self.at_once = at_once
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
        get = cache().get_at_once_or_compute if self.at_once else cache().get_or_compute
        return get(self._key_of(canonical), lambda: self.uncached(*canonical), self.keep)

    def many(self, calls: Iterable[tuple]) -> list[R]:
        """The results of several calls (each a tuple of arguments), asked of the cache at once."""
        if self.at_once:
            return [self(*args) for args in calls]
        canonical = [self.canonical(*args) for args in calls]
        keys = [self._key_of(args) for args in canonical]
        return cache().get_many_or_compute(keys, lambda i: self.uncached(*canonical[i]), self.keep)

    def __repr__(self) -> str:
        return f"<cached read {self.name}>"


# Every cached read, by name: the tests check each one is forgotten by the writes that change it.
READS: dict[str, CachedRead] = {}


def memoized(
    name: str,
    canonical: Callable[..., tuple] | None = None,
    keep: Callable[[Any], bool] | None = None,
    at_once: bool = False,
) -> Callable[[Callable[P, R]], CachedRead[P, R]]:
    """Cache a read under keys ``name:arg1:arg2``; ``read.key(...)`` names them for ``forget``.

    ``canonical`` maps arguments to the ones that identify a result; ``keep``
    says which results are worth keeping (by default, anything but None); a read
    ``at_once`` is one whose writes every process must see at once (a log out).
    """

    def decorate(read: Callable[P, R]) -> CachedRead[P, R]:
        if name in READS:
            raise ValueError(f"two cached reads are named {name!r}")
        READS[name] = CachedRead(name, read, canonical, keep, at_once)
        return READS[name]

    return decorate


def seen_at_once() -> set[str]:
    """The names of the reads whose writes every process must see at once."""
    return {name for name, read in READS.items() if read.at_once}


def forget(*keys: CacheKey) -> None:
    """Within a write's transaction: the entries under these keys are stale once it commits."""
    for key in keys:
        if not isinstance(key, CacheKey):
            raise TypeError(f"forget() takes keys made by a cached read's .key(), not {key!r}")
    cache().forget(*keys)


def change(
    statement: Executable, params: dict[str, Any], forgets: tuple[CacheKey, ...] = (), patch: Patch | None = None
) -> tuple | None:
    """Within ``transaction(one_change=True)``: run ``statement``, which changes at most one row and returns
    it. If it changed one, the entries under ``forgets`` are stale once it commits, and so is
    ``patch.key``'s, unless the cache can tell that entry is current: then ``patch.change(entry, row)``
    takes its place (None: it cannot tell either). The row, or None."""
    for key in (*forgets, *([patch.key] if patch is not None else [])):
        if not isinstance(key, CacheKey):
            raise TypeError(f"change() takes keys made by a cached read's .key(), not {key!r}")
    return cache().change(statement, params, forgets, patch)
