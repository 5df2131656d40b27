"""Hashing and checking passwords with bcrypt, at the configured cost.

bcrypt is the costliest thing the app does (about a quarter of a second of CPU
at cost 12), on purpose. Four things keep it from hurting everything else:

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
* A hash costs as little as bcrypt allows. ``BCRYPT_LIBRARY=libxcrypt``
  hashes with the system's crypt library (libxcrypt, whose bcrypt is
  Openwall's hand-tuned C) instead of pyca's ``bcrypt`` package: the same
  algorithm, cost and ``$2b$`` hashes, either one checks the other's, at
  about five sixths of the CPU on x86-64. Where the system's library cannot
  make pyca's hash of a test password (macOS, say), the app says so in its
  log and stays on pyca.
* Waiting is bounded. A hash that cannot start within ``HASH_WAIT_S`` of the
  moment nginx received the request is not computed: the request is answered
  at once with 503 and Retry-After ("too busy, try again"), and one that
  could not start in time, given the queue ahead of it, is refused without
  waiting. So nobody waits a minute for a login, no hash is computed for a
  request the front server has given up on, and past capacity the machine
  sheds logins instead of letting them pile up behind each other.
"""

from __future__ import annotations

import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import bcrypt as pyca_bcrypt
from flask import Flask, current_app, has_request_context, request

from .errors import Busy
from .extensions import bcrypt, db

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# When nginx received the request (its $msec, seconds since the epoch), passed by nginx.conf.
REQUEST_START = "REQUEST_START_MSEC"
BUSY = "Too many people are logging in right now. Nothing was sent anywhere: try again in a few seconds."
# What a hashing thread calls itself (``top -H``, /proc/<pid>/task/<tid>/comm): the profile and the
# benchmark count the CPU time of hashing by it, apart from everything else the process does.
HASHING_THREAD = "tweepy-hash"


@dataclass(frozen=True)
class Library:
    """One implementation of bcrypt: how it makes a hash at a cost, and checks a password against one."""

    name: str
    hash: Callable[[str, int], str]
    matches: Callable[[str, str], bool]  # (password_hash, password)


def _pyca_hash(password: str, cost: int) -> str:
    return bcrypt.generate_password_hash(password, cost).decode()


def _pyca_matches(password_hash: str, password: str) -> bool:
    return bcrypt.check_password_hash(password_hash, password)


def _crypt(password: str, setting: str) -> str:
    """libxcrypt's bcrypt of ``password`` with the salt and cost of ``setting`` (a salt, or a whole hash)."""
    import legacycrypt  # ctypes over crypt_r: thread-safe, and the GIL is released while it hashes

    # A C string ends at NUL and bcrypt reads 72 bytes: refuse what either would silently cut short.
    if "\x00" in password or len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ValueError("bcrypt takes at most 72 bytes and no NUL")
    hashed = legacycrypt.crypt(password, setting)
    if not hashed or not hashed.startswith("$2"):
        raise ValueError("not a bcrypt salt or hash")  # libxcrypt answers "*0" to a setting it cannot use
    return hashed


def _libxcrypt_hash(password: str, cost: int) -> str:
    return _crypt(password, pyca_bcrypt.gensalt(cost).decode())


def _libxcrypt_matches(password_hash: str, password: str) -> bool:
    return hmac.compare_digest(_crypt(password, password_hash).encode(), password_hash.encode())


LIBRARIES = {
    "pyca": Library("pyca", _pyca_hash, _pyca_matches),
    "libxcrypt": Library("libxcrypt", _libxcrypt_hash, _libxcrypt_matches),
}


def makes_pycas_hashes(library: Library) -> bool:
    """Whether ``library`` checks pyca's hashes as pyca does: the password matches, another does not."""
    try:
        for password in ("tweepy123", "pässwörd ✓"):
            made = pyca_bcrypt.hashpw(password.encode(), pyca_bcrypt.gensalt(4)).decode()
            if not library.matches(made, password) or library.matches(made, password + "!"):
                return False
        return True
    except (ImportError, OSError, ValueError):
        return False


def init_app(app: Flask) -> None:
    """Choose the bcrypt library of ``BCRYPT_LIBRARY``, once it has shown it makes bcrypt's hashes here."""
    name = app.config["BCRYPT_LIBRARY"]
    if name == "libxcrypt" and not makes_pycas_hashes(LIBRARIES[name]):
        app.logger.warning("BCRYPT_LIBRARY=libxcrypt: this system's crypt library has no bcrypt; hashing with pyca")
        name = "pyca"
    app.extensions["tweepy_bcrypt"] = LIBRARIES[name]


def library() -> Library:
    """The bcrypt library the app hashes with."""
    return current_app.extensions["tweepy_bcrypt"]


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
            result = self.pool.apply(_in_hashing_thread, (work, *args)) if self.pool is not None else work(*args)
            self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * (time.monotonic() - started)
            return result
        finally:
            self.free.release()


def _in_hashing_thread(work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` on a pool thread that carries ``HASHING_THREAD`` as its name (one system call a hash)."""
    from setproctitle import setthreadtitle  # requirements/serve.txt's, as gevent's pool is

    setthreadtitle(HASHING_THREAD)
    return work(*args)


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
    return _slow(library().hash, password, _cost())


def password_matches(password_hash: str | None, password: str) -> bool:
    """Check a password; with no user (``None``) spend the same time and say no."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    # Checking against a throwaway hash keeps "no such user" as slow as "wrong password".
    matches = _slow(library().matches, password_hash or _decoy_hash(_cost()), password)
    return matches and password_hash is not None


@cache
def _decoy_hash(cost: int) -> str:
    return bcrypt.generate_password_hash(secrets.token_hex(16), cost).decode()
