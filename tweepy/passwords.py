"""Hashing and checking passwords with bcrypt, at the configured cost, in turns.

bcrypt is the costliest thing the app does, on purpose. What keeps it from hurting the rest:
a hash never holds a database connection (``connection_given_back``); each process hashes in
the turns of its ``HashingQueue`` (``hashing.py``), at most ``HASHING_SLOTS`` at once, on native
threads with ``BCRYPT_IN_THREADPOOL`` (bcrypt releases the GIL), which ``PAGES_NICE`` puts ahead
of the thread serving pages; ``BCRYPT_LIBRARY=libxcrypt`` hashes with the system's bcrypt, the
same hashes for less CPU. A login that cannot start hashing within ``HASH_WAIT_S`` of nginx
receiving it is answered 503 without any hash spent on it; with ``HASH_KNOWN_DEVICES_FIRST``,
logins from devices their accounts know go ahead of everyone else's, and ``NEWCOMERS_NICE`` gives
everyone else's a queue of its own, whose hashes move below the pages in a herd, so a herd of
newcomers takes only the cores the pages leave; the known devices' hashes go below with them while
the herd is being refused. ``PAGES_LATE_S`` gives the pages a core back once every request has
waited that long on its way in.
"""

from __future__ import annotations

import hmac
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import bcrypt as pyca_bcrypt
from flask import Flask, current_app, has_request_context, request

from .extensions import bcrypt, db
from .hashing import HashingQueue, say_where_the_time_went

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# When nginx received the request (its $msec, seconds since the epoch), passed by nginx.conf.
REQUEST_START = "REQUEST_START_MSEC"


@dataclass(frozen=True)
class Library:
    """One implementation of bcrypt: how it makes a hash at a cost, and checks a password against one."""

    name: str
    hash: Callable[[str, int], str]
    matches: Callable[[str, str], bool]  # (password_hash, password)


# Imported with the module: ``_crypt`` runs on the hashing threads, which must import nothing (hashing_threads.py).
try:
    import legacycrypt  # ctypes over crypt_r: thread-safe, and the GIL is released while it hashes
except ImportError:  # no libcrypt here: pyca's bcrypt is the only library (makes_pycas_hashes says no)
    legacycrypt = None


def _pyca_hash(password: str, cost: int) -> str:
    return bcrypt.generate_password_hash(password, cost).decode()


def _pyca_matches(password_hash: str, password: str) -> bool:
    return bcrypt.check_password_hash(password_hash, password)


def _crypt(password: str, setting: str) -> str:
    """libxcrypt's bcrypt of ``password`` with the salt and cost of ``setting`` (a salt, or a whole hash)."""
    if legacycrypt is None:
        raise ImportError("libcrypt / libxcrypt missing")
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
    say where a hashing answer's time went, and put hashing ahead of pages (``PAGES_NICE``)."""
    name = app.config["BCRYPT_LIBRARY"]
    if name == "libxcrypt" and not makes_pycas_hashes(LIBRARIES[name]):
        app.logger.warning("BCRYPT_LIBRARY=libxcrypt: this system's crypt library has no bcrypt; hashing with pyca")
        name = "pyca"
    app.extensions["tweepy_bcrypt"] = LIBRARIES[name]
    app.after_request(say_where_the_time_went)
    if app.config["PAGES_LATE_S"] and app.config["BCRYPT_IN_THREADPOOL"]:
        app.before_request(_note_how_long_it_waited)
    _put_hashing_first(app)


def library() -> Library:
    """The bcrypt library the app hashes with."""
    return current_app.extensions["tweepy_bcrypt"]


@cache
def _queue_of(
    pid: int,
    slots: int,
    wait_s: float,
    native_threads: bool,
    pages_late_s: float,
    nice: int,
    herd_of: HashingQueue | None = None,
) -> HashingQueue:
    """One queue per process (two with NEWCOMERS_NICE), made after the fork (uWSGI's lazy-apps): its
    threads are its own."""
    return HashingQueue(slots, wait_s, native_threads, pages_late_s=pages_late_s, nice=nice, herd_of=herd_of)


def _queue(config, first: bool = True) -> HashingQueue:
    """The queue of the process's hashes; with NEWCOMERS_NICE, the one of the lane served first
    (``first``) or the newcomers' own, whose hashes move to threads below the pages in a herd (the
    first's follow them while it arrives)."""
    args = (
        os.getpid(),
        config["HASHING_SLOTS"],
        config["HASH_WAIT_S"],
        config["BCRYPT_IN_THREADPOOL"],
        config["PAGES_LATE_S"] if config["BCRYPT_IN_THREADPOOL"] else 0.0,
    )
    nice = config["NEWCOMERS_NICE"]
    newcomers = _queue_of(*args, nice)  # without NEWCOMERS_NICE, the process's one queue
    # The known devices' queue follows a herd of newcomers below the pages while it arrives.
    return _queue_of(*args, nice, newcomers) if first and nice else newcomers


def _queues(config) -> tuple[HashingQueue, ...]:
    return (_queue(config), _queue(config, first=False)) if config["NEWCOMERS_NICE"] else (_queue(config),)


def _note_how_long_it_waited() -> None:
    """Before every request: how long it waited between nginx and the app, which tells the queues
    whether the pages are late."""
    received_at = _received_at()
    if received_at is not None:
        for queue in _queues(current_app.config):
            queue.note_request(received_at)


def _put_hashing_first(app: Flask) -> None:
    """Lower the CPU priority of the thread making the app, which serves its requests, by ``PAGES_NICE``.

    The hashing threads are started first, from this thread at its own priority (a thread inherits
    its maker's), so they stay ahead of it: when logins wait, the cores go to their hashes, and pages,
    which have time to spare, run in what is left. The newcomers' threads for a herd, with
    NEWCOMERS_NICE, lower their own priority from there."""
    nice = app.config["PAGES_NICE"]
    if nice <= 0 or not app.config["BCRYPT_IN_THREADPOOL"]:
        return
    _queues(app.config)
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


def refuse_if_busy(known_device: bool = False) -> None:
    """Busy, at once, when this request's hash could not start in time: before it counts a login attempt
    or reads a password, which a refusal would waste. The hash itself may still be refused, later."""
    queue, first = _lane(known_device)
    refusal = queue.refusal(_received_at(), first)
    if refusal is not None:
        raise refusal


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


def _lane(known_device: bool) -> tuple[HashingQueue, bool]:
    """The queue a hash waits in, and whether in the lane served first (a login from a device its account
    knows): one answer for the refusal asked before a request's work and for the hash itself."""
    first = known_device and current_app.config["HASH_KNOWN_DEVICES_FIRST"]
    return _queue(current_app.config, first), first


def _slow(work: Callable[..., Any], *args: Any, known_device: bool = False) -> Any:
    if db.session().in_transaction():
        raise RuntimeError("hash inside `with connection_given_back():`, not while holding a database connection")
    queue, first = _lane(known_device)
    return queue.run(work, *args, received_at=_received_at(), known=first)


def _cost() -> int:
    return current_app.config["BCRYPT_LOG_ROUNDS"]


def hash_password(password: str, returning: bool = False) -> str:
    """A new account's hash; ``returning``: asked from a browser that logged in here before, which
    hashes in the lane served first as its logins do."""
    return _slow(library().hash, password, _cost(), known_device=returning)


def password_matches(password_hash: str | None, password: str, known_device: bool = False) -> bool:
    """Check a password; with no user (``None``) spend the same time and say no. ``known_device``: the
    login comes from a device the account knows."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    # Checking against a throwaway hash keeps "no such user" as slow as "wrong password".
    matches = _slow(library().matches, password_hash or _decoy_hash(_cost()), password, known_device=known_device)
    return matches and password_hash is not None


@cache
def _decoy_hash(cost: int) -> str:
    return bcrypt.generate_password_hash(secrets.token_hex(16), cost).decode()
