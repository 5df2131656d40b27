"""``Invalidations``: Redis names each key under some prefixes as anyone changes it, on a connection of this process.

The connection asks Redis to track the prefixes (``CLIENT TRACKING ON BCAST``, over RESP3): when any client
changes or deletes such a key, Redis pushes its name here before the writer gets its answer. ``changed()``
reads what has arrived without waiting, so a copy kept in the process, checked after ``changed()``, is as
fresh as Redis was when the writer was answered. While the connection is down nothing can be known, and
on the way down or back up ``changed()`` says that every copy must go.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# What ``changed()`` returns when any key may have changed unseen.
EVERYTHING = None


class Invalidations:
    """The names (prefix kept) of tracked keys changed since the last ``changed()``, pushed by Redis."""

    def __init__(self, url: str, prefixes: Callable[[], list[str]], timeout: float, retry_every: float) -> None:
        import redis

        # One connection, made in the process that uses it (never inherited through a fork).
        self.pool = redis.ConnectionPool.from_url(
            url, protocol=3, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self.failed = (redis.RedisError, OSError)
        self.prefixes = prefixes  # asked when connecting, once every read declared its keys
        self.retry_every = retry_every
        self.connection = None
        self.client_id: int | None = None  # Redis's id for the connection (CLIENT KILL ID takes it)
        self.pid: int | None = None
        self.retry_at = 0.0
        self.arrived: list[bytes] = []
        self.flushed = False
        self.lock = threading.Lock()

    @property
    def watching(self) -> bool:
        """Whether every change is being pushed here (as of the last ``changed()``)."""
        return self.connection is not None and self.pid == os.getpid()

    def changed(self) -> list[str] | None:
        """The tracked keys changed since the last call, or ``EVERYTHING`` when some may have changed unseen
        (the connection went down or came up since, or Redis was flushed)."""
        with self.lock:
            if not self.watching:
                return EVERYTHING if self._connect() else []
            try:
                while self.connection.can_read(timeout=0):
                    self.connection.read_response(push_request=True)
            except self.failed as error:
                log.warning("read cache: lost Redis's invalidations (%s); reading it for every copy", error)
                self._disconnect()
                return EVERYTHING
            keys, self.arrived = self.arrived, []
            if self.flushed:
                self.flushed = False
                return EVERYTHING
            return [key.decode() for key in keys]

    def _pushed(self, message: list) -> None:
        # ["invalidate", [names]], or ["invalidate", None] when Redis dropped every key (FLUSHALL).
        if message[1] is None:
            self.flushed = True
        else:
            self.arrived.extend(message[1])

    def _connect(self) -> bool:
        """Try to (re)connect, at most every ``retry_every``; whether it worked."""
        if self.pid != os.getpid():  # forked: the parent's socket is not this process's
            self.connection, self.pid, self.retry_at = None, os.getpid(), 0.0
        if time.monotonic() < self.retry_at:
            return False
        self.retry_at = time.monotonic() + self.retry_every
        connection = self.pool.make_connection()
        try:
            connection.connect()
            connection.send_command("CLIENT", "ID")
            client_id = int(connection.read_response())
            prefixes = [part for prefix in self.prefixes() for part in ("PREFIX", prefix)]
            connection.send_command("CLIENT", "TRACKING", "ON", "BCAST", *prefixes)
            if connection.read_response() not in (b"OK", "OK"):
                raise OSError("Redis refused to track keys")
        except self.failed as error:
            connection.disconnect()
            log.warning("read cache: cannot follow Redis's invalidations (%s); reading it for every copy", error)
            return False
        connection._parser.set_invalidation_push_handler(self._pushed)  # redis-py offers no public hook
        self.connection, self.client_id, self.arrived, self.flushed = connection, client_id, [], False
        return True

    def _disconnect(self) -> None:
        if self.connection is not None:
            self.connection.disconnect()
        self.connection = None
        self.retry_at = 0.0  # a connection Redis closed is made again at once; a refused one every retry_every
