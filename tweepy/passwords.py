"""Hashing and checking passwords with bcrypt, at the configured cost, in turns.

bcrypt is the costliest thing the app does, on purpose. What keeps it from hurting the rest:
a hash never holds a database connection (``connection_given_back``); each process hashes at
most ``HASHING_SLOTS`` passwords at once, on native threads with ``BCRYPT_IN_THREADPOOL``
(bcrypt releases the GIL), which ``PAGES_NICE`` puts ahead of the thread serving pages;
``BCRYPT_LIBRARY=libxcrypt`` hashes with the system's bcrypt, the same hashes for less CPU;
and ``HashingQueue`` bounds the wait: a login that cannot start hashing within ``HASH_WAIT_S``
of nginx receiving it is answered 503 with a Retry-After that says how long the queue needs,
without any hash spent on it. With ``PAGES_WAIT_LIMIT_MS``, while the requests a process begins
have been waiting too long since nginx received them, its slots rest after each hash (``Lateness``).
Every answer that hashed says where its time went in a Server-Timing header (``before``, ``wait``,
``hash``, ``back``, ``after``).
"""

from __future__ import annotations

import hmac
import math
import os
import random
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import bcrypt as pyca_bcrypt
from flask import Flask, current_app, g, has_request_context, request

from .errors import Busy
from .extensions import bcrypt, db

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# When nginx received the request (its $msec, seconds since the epoch), passed by nginx.conf.
REQUEST_START = "REQUEST_START_MSEC"
BUSY = "Too many people are logging in right now. Nothing was sent anywhere: try again in a few seconds."
# The share of its time a hashing slot rests while requests are late: the cores it leaves go to them.
REST_SHARE = 0.3
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
    """Choose the bcrypt library of ``BCRYPT_LIBRARY`` (once it has shown it makes bcrypt's hashes here),
    say where a hashing answer's time went, put hashing ahead of pages (``PAGES_NICE``), and with
    ``PAGES_WAIT_LIMIT_MS`` note how long every request waited before the app began it."""
    name = app.config["BCRYPT_LIBRARY"]
    if name == "libxcrypt" and not makes_pycas_hashes(LIBRARIES[name]):
        app.logger.warning("BCRYPT_LIBRARY=libxcrypt: this system's crypt library has no bcrypt; hashing with pyca")
        name = "pyca"
    app.extensions["tweepy_bcrypt"] = LIBRARIES[name]
    app.after_request(_say_where_the_time_went)
    if app.config["PAGES_WAIT_LIMIT_MS"]:
        app.before_request(_note_how_long_it_waited)
    _put_hashing_first(app)


def library() -> Library:
    """The bcrypt library the app hashes with."""
    return current_app.extensions["tweepy_bcrypt"]


class Waiter:
    """A request waiting for a hashing slot: when it must start by, and whether a slot was handed to it."""

    __slots__ = ("deadline", "given", "handed")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # monotonic seconds; past it, the request is refused unhashed
        self.given = threading.Event()  # gevent's under monkey-patching: the greenlet sleeps on it
        self.handed = False  # a slot is this waiter's (False when woken only to be refused)


def next_waiter(waiting: deque[Waiter], now: float, congested: bool) -> Waiter | None:
    """Whom a freed slot goes to, and who is refused on the way.

    Waiters past their deadline are dropped (woken unhanded: they answer "busy"). Then the
    oldest waiter gets the slot, or, while the queue is congested, the newest: the one with
    the most time left, so the logins that are answered are answered in time instead of
    every login being answered late (adaptive LIFO)."""
    while waiting:
        waiter = waiting.pop() if congested else waiting.popleft()
        if waiter.deadline > now:
            return waiter
        waiter.given.set()
    return None


def retry_after_s(queued: int, slots: int, seconds_per_hash: float, spread: float) -> int:
    """Seconds a refused person should wait: long enough for the hashes queued now to be done, times
    ``spread`` (1 to 2, drawn per refusal) so that the refused do not all come back together."""
    drain = queued * seconds_per_hash / max(1, slots)
    return max(1, math.ceil(drain * spread))


class Lateness:
    """Whether the requests a process began lately had waited too long since nginx received them:
    more than a tenth of those begun in the last whole second, or in this one, waited over ``limit_s``."""

    def __init__(self, limit_s: float, clock: Callable[[], float] = time.time) -> None:
        self.limit_s = limit_s
        self.clock = clock
        self.second = int(clock())
        self.now = [0, 0]  # begun in this second, and of them late
        self.before = [0, 0]  # the same for the second before

    def _roll(self) -> None:
        second = int(self.clock())
        if second != self.second:
            self.before = self.now if second == self.second + 1 else [0, 0]
            self.now = [0, 0]
            self.second = second

    def note(self, waited_s: float) -> None:
        """A request begun after waiting ``waited_s`` since nginx received it."""
        self._roll()
        self.now[0] += 1
        self.now[1] += waited_s > self.limit_s

    @property
    def late(self) -> bool:
        self._roll()
        return any(begun and late * 10 > begun for begun, late in (self.before, self.now))


class HashingQueue:
    """The hashing slots of one process, and the requests waiting for one.

    A request may wait until its deadline (``wait_s`` after nginx received it). A slot that frees
    goes to the oldest waiter; once the queue has not been empty for ``wait_s / 3`` (congested), to
    the newest. A request that could not start before its deadline given the queue ahead of it is
    refused at once; every refusal says, in Retry-After, how long the queue needs to drain. While
    ``lateness`` says the process's requests are late, a slot rests after each hash (``REST_SHARE`` of
    its time) before it is given back: the login is answered at once, and the cores go to the requests."""

    def __init__(
        self,
        slots: int,
        wait_s: float,
        native_threads: bool,
        clock: Callable[[], float] = time.monotonic,
        spread: Callable[[], float] = lambda: 1.0 + random.random(),
        lateness: Lateness | None = None,
    ) -> None:
        self.slots = slots
        self.wait_s = wait_s
        self.lateness = lateness
        self.clock = clock
        self.spread = spread
        self.lock = threading.Lock()
        self.busy = 0
        self.waiting: deque[Waiter] = deque()
        self.last_empty = clock()  # the last time nobody waited
        self.seconds_per_hash = 0.25  # learnt from the hashes done, to judge the queue ahead
        self.pool = None
        if native_threads:
            from gevent.threadpool import ThreadPool

            self.pool = ThreadPool(maxsize=slots)
            self.pool.size = slots  # its threads start now, from the thread making the queue

    @property
    def congested(self) -> bool:
        return bool(self.waiting) and self.clock() - self.last_empty > self.wait_s / 3

    def busy_refusal(self) -> Busy:
        queued = self.busy + len(self.waiting)
        return Busy(BUSY, retry_after=retry_after_s(queued, self.slots, self.seconds_per_hash, self.spread()))

    def _take(self, deadline: float) -> Waiter | None:
        """A slot at once (None), or a place in the queue (a Waiter); Busy when it could not start in time."""
        with self.lock:
            now = self.clock()
            if not self.waiting:
                self.last_empty = now
                if self.busy < self.slots and deadline > now:
                    self.busy += 1
                    return None
            # The slot it can hope for: the next to free while congested (newest first), else its turn.
            ahead = 1 if self.congested else len(self.waiting) + 1
            if now + ahead * self.seconds_per_hash / self.slots > deadline:
                raise self.busy_refusal()
            waiter = Waiter(deadline)
            self.waiting.append(waiter)
            return waiter

    def _wait(self, waiter: Waiter) -> None:
        try:
            waiter.given.wait(max(0.0, waiter.deadline - self.clock()))
        except BaseException:  # the request's greenlet killed while it waited: a slot handed to it is passed on
            with self.lock:
                handed = waiter.handed
                if not handed and waiter in self.waiting:
                    self.waiting.remove(waiter)
            if handed:
                self._give_back()
            raise
        with self.lock:
            if waiter.handed:
                return
            if waiter in self.waiting:
                self.waiting.remove(waiter)
            raise self.busy_refusal()

    def _give_back(self) -> None:
        with self.lock:
            now = self.clock()
            waiter = next_waiter(self.waiting, now, self.congested)
            if waiter is None:
                self.busy -= 1
            else:
                waiter.handed = True  # the slot passes to it, still counted busy
                waiter.given.set()
            if not self.waiting:
                self.last_empty = now

    def run(self, work: Callable[..., Any], *args: Any, received_at: float | None = None) -> Any:
        """``work(*args)`` in a hashing slot; Busy if it could not start by ``wait_s`` after ``received_at``
        (nginx's clock, seconds since the epoch; now when not given)."""
        entered = self.clock()
        waited = max(0.0, time.time() - received_at) if received_at else 0.0
        waiter = self._take(entered - waited + self.wait_s)
        if waiter is not None:
            self._wait(waiter)
        rest_s = 0.0
        try:
            started = self.clock()
            # `is not None`: an idle ThreadPool has no tasks, so it is falsy.
            if self.pool is not None:
                result, hashing_s = self.pool.apply(_in_hashing_thread, (work, *args))
            else:
                result, hashing_s = _timed(work, *args)
            if self.lateness is not None and self.lateness.late:
                rest_s = hashing_s * REST_SHARE / (1 - REST_SHARE)
            # What a hash holds its slot for, rest included: the queue ahead is judged by it.
            self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * (hashing_s + rest_s)
            _note_timing(before=waited, wait=started - entered, hash=hashing_s, back=self.clock() - started - hashing_s)
            return result
        finally:
            if rest_s:
                self._give_back_after(rest_s)
            else:
                self._give_back()

    def _give_back_after(self, rest_s: float) -> None:
        """Give the slot back once it has rested ``rest_s``, without holding up the answer of the hash it made."""
        timer = threading.Timer(rest_s, self._give_back)  # a greenlet under gevent's monkey-patching
        timer.daemon = True
        timer.start()


def _timed(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    started = time.monotonic()
    return work(*args), time.monotonic() - started


def _in_hashing_thread(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``work(*args)`` and how long it took, on a pool thread that carries ``HASHING_THREAD`` as its name."""
    from setproctitle import setthreadtitle  # requirements/serve.txt's, as gevent's pool is

    setthreadtitle(HASHING_THREAD)
    return _timed(work, *args)


def _note_timing(**seconds: float) -> None:
    if has_request_context():
        g.hash_timing = seconds
        g.hash_returned_at = time.monotonic()


def _say_where_the_time_went(response):
    timing = g.pop("hash_timing", None)
    if timing is not None:
        timing["after"] = time.monotonic() - g.pop("hash_returned_at")
        response.headers["Server-Timing"] = ", ".join(f"{name};dur={1000 * s:.1f}" for name, s in timing.items())
    return response


@cache
def _queue_of(pid: int, slots: int, wait_s: float, native_threads: bool, pages_wait_s: float) -> HashingQueue:
    """One queue per process, made after the fork (uWSGI's lazy-apps): its threads are its own."""
    lateness = Lateness(pages_wait_s) if pages_wait_s else None
    return HashingQueue(slots, wait_s, native_threads, lateness=lateness)


def _queue(config) -> HashingQueue:
    return _queue_of(
        os.getpid(),
        config["HASHING_SLOTS"],
        config["HASH_WAIT_S"],
        config["BCRYPT_IN_THREADPOOL"],
        config["PAGES_WAIT_LIMIT_MS"] / 1000,
    )


def _note_how_long_it_waited() -> None:
    received = _received_at()
    if received is not None:
        _queue(current_app.config).lateness.note(time.time() - received)


def _put_hashing_first(app: Flask) -> None:
    """Lower the CPU priority of the thread making the app, which serves its requests, by ``PAGES_NICE``.

    The hashing threads are started first, from this thread at its own priority (a thread inherits
    its maker's), so they stay ahead of it: when logins wait, the cores go to their hashes, and pages,
    which have time to spare, run in what is left."""
    nice = app.config["PAGES_NICE"]
    if nice <= 0 or not app.config["BCRYPT_IN_THREADPOOL"]:
        return
    _queue(app.config)
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


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
    return _queue(current_app.config).run(work, *args, received_at=_received_at())


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
