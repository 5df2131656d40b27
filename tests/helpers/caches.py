"""What a cache backend holds, as the tests look at it, and Redis key prefixes of a test's own.

Each test that uses Redis writes under a prefix of its own (``new_prefix``) and drops it afterwards
(``drop_prefix``), so the tests can share the machine's Redis with anyone. A test that stops and
starts Redis runs one of its own (``OwnRedis``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time

import pytest
import redis

from tweepy.cache import RedisCache, codec

from .services import redis_url

# Longest a redis-server of a test's own may take to start or stop.
START_TIMEOUT_S = 10


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
    backend = getattr(backend, "far", backend)  # a near cache's Redis
    payload = backend.client.hget(backend.prefix + key, "value")
    return None if payload is None else codec.decode(payload)


def cached_keys(app) -> set[str]:
    """The keys whose values the app's cache holds: its own entries, or those in Redis under its prefix."""
    backend = app.extensions["tweepy_cache"]
    if not isinstance(backend, RedisCache):
        return set(backend.entries)
    names = backend.client.scan_iter(match=backend.prefix + "*", count=1000)
    return {name.decode()[len(backend.prefix) :] for name in names if backend.client.hexists(name, "value")}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnRedis:
    """A redis-server of this test's own, on a free port, without persistence, to stop and start again."""

    def __init__(self, tmp_path) -> None:
        if shutil.which("redis-server") is None:
            redis_url()  # skips, or fails in CI, as for a Redis that does not answer
            pytest.skip("no redis-server to start")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.folder = tmp_path
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(START_TIMEOUT_S)

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.stop()


def same_types(value, expected) -> bool:
    """Whether ``value`` is built of the very types ``expected`` is, all the way down."""
    if type(value) is not type(expected):
        return False
    if isinstance(expected, frozenset):
        value, expected = sorted(value), sorted(expected)
    if isinstance(expected, (tuple, list)):
        return all(same_types(a, b) for a, b in zip(value, expected, strict=True))
    return True
