"""What a cache backend holds, as the tests look at it, and Redis key prefixes of a test's own.

Each test that uses Redis writes under a prefix of its own (``new_prefix``) and drops it afterwards
(``drop_prefix``), so the tests can share the machine's Redis with anyone.
"""

from __future__ import annotations

import os
import secrets

import redis

from tweepy.cache import RedisCache, codec


def new_prefix() -> str:
    return f"tweepy-test:{os.getpid()}:{secrets.token_hex(4)}:"


def drop_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    names = list(client.scan_iter(match=prefix + "*", count=1000))
    if names:
        client.unlink(*names)
    client.close()


def stored(app, key: str):
    """The value Redis keeps under a cache key (None if none), as any node would read it."""
    backend = app.extensions["tweepy_cache"]
    payload = backend.client.hget(backend.prefix + key, "value")
    return None if payload is None else codec.decode(payload)


def cached_keys(app) -> set[str]:
    """The keys whose values the app's cache holds: its own entries, or those in Redis under its prefix."""
    backend = app.extensions["tweepy_cache"]
    if not isinstance(backend, RedisCache):
        return set(backend.entries)
    names = backend.client.scan_iter(match=backend.prefix + "*", count=1000)
    return {name.decode()[len(backend.prefix) :] for name in names if backend.client.hexists(name, "value")}
