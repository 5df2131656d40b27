"""Hashing and checking passwords with bcrypt, at the configured cost.

bcrypt is the costliest thing the app does (about a quarter of a second of CPU
at cost 12), on purpose. Three things keep it from hurting everything else:

* A hash never holds a database connection: the caller hashes inside
  ``with connection_given_back():``, and hashing refuses to start otherwise.
  (Measured with gevent: greenlets waiting for hashes while holding
  connections drained the pool, and requests that only wanted to read failed
  after the pool timeout.)
* Hashes take turns: each process hashes at most ``HASHING_SLOTS`` passwords
  at once. With ``BCRYPT_IN_THREADPOOL`` (gevent) they run on that many
  native threads, so the process's other greenlets keep running (bcrypt
  releases the GIL), at the same priority as everything else: logins get
  their fair share of the cores, no more and no less.
* Waiting is bounded. A hash that cannot start within ``HASH_WAIT_S`` of the
  moment nginx received the request is not computed: the request is answered
  at once with 503 and Retry-After ("too busy, try again"), and one that
  could not start in time, given the queue ahead of it, is refused without
  waiting. So nobody waits a minute for a login, no hash is computed for a
  request the front server has given up on, and past capacity the machine
  sheds logins instead of letting them pile up behind each other.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from flask import current_app, has_request_context, request

from .errors import Busy
from .extensions import bcrypt, db

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# When nginx received the request (its $msec, seconds since the epoch), passed by nginx.conf.
REQUEST_START = "REQUEST_START_MSEC"
BUSY = "Too many people are logging in right now. Nothing was sent anywhere: try again in a few seconds."


class HashingQueue:
    """The hashing slots of one process, and the time a hash may wait for one."""

    def __init__(self, slots: int, wait_s: float, native_threads: bool) -> None:
        self.slots = slots
        self.wait_s = wait_s
        # threading's semaphore is gevent's under monkey-patching: greenlets queue on it.
        self.free = threading.BoundedSemaphore(slots)
        self.waiting = 0
        self.seconds_per_hash = 0.25  # learnt from the hashes done, to judge the queue ahead
        self.pool = None
        if native_threads:
            from gevent.threadpool import ThreadPool

            self.pool = ThreadPool(maxsize=slots)

    def run(self, work: Callable[..., Any], *args: Any, received_at: float | None = None) -> Any:
        waited = max(0.0, time.time() - received_at) if received_at else 0.0
        budget = self.wait_s - waited
        ahead = self.waiting * self.seconds_per_hash / self.slots
        if budget <= 0 or ahead > budget:
            raise Busy(BUSY, retry_after=max(1, round(self.wait_s)))
        self.waiting += 1
        try:
            got_a_slot = self.free.acquire(timeout=budget)
        finally:
            self.waiting -= 1
        if not got_a_slot:
            raise Busy(BUSY, retry_after=max(1, round(self.wait_s)))
        try:
            started = time.monotonic()
            # `is not None`: an idle ThreadPool has no tasks, so it is falsy.
            result = self.pool.apply(work, args) if self.pool is not None else work(*args)
            self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * (time.monotonic() - started)
            return result
        finally:
            self.free.release()


@cache
def _queue_of(pid: int, slots: int, wait_s: float, native_threads: bool) -> HashingQueue:
    """One queue per process, made after the fork (uWSGI's lazy-apps): its threads are its own."""
    return HashingQueue(slots, wait_s, native_threads)


def _received_at() -> float | None:
    raw = request.environ.get(REQUEST_START) if has_request_context() else None
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


@contextmanager
def connection_given_back() -> Iterator[None]:
    """End the request's database transaction and give its connection back to the pool.

    Whatever the request reads next opens a new transaction on a connection
    taken again from the pool, once the slow part is over.
    """
    db.session.close()
    yield


def _slow(work: Callable[..., Any], *args: Any) -> Any:
    if db.session().in_transaction():
        raise RuntimeError("hash inside `with connection_given_back():`, not while holding a database connection")
    config = current_app.config
    queue = _queue_of(os.getpid(), config["HASHING_SLOTS"], config["HASH_WAIT_S"], config["BCRYPT_IN_THREADPOOL"])
    return queue.run(work, *args, received_at=_received_at())


def _cost() -> int:
    return current_app.config["BCRYPT_LOG_ROUNDS"]


def hash_password(password: str) -> str:
    return _slow(bcrypt.generate_password_hash, password, _cost()).decode()


def password_matches(password_hash: str | None, password: str) -> bool:
    """Check a password; with no user (``None``) spend the same time and say no."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    # Checking against a throwaway hash keeps "no such user" as slow as "wrong password".
    matches = _slow(bcrypt.check_password_hash, password_hash or _decoy_hash(_cost()), password)
    return matches and password_hash is not None


@cache
def _decoy_hash(cost: int) -> str:
    return bcrypt.generate_password_hash(secrets.token_hex(16), cost).decode()
