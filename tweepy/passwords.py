"""Hashing and checking passwords with bcrypt, at the configured cost.

bcrypt is the costliest thing the app does (about a quarter of a second of CPU
at cost 12), on purpose. Two things keep it from hurting everything else:

* A hash never holds a database connection: the caller hashes inside
  ``with connection_given_back():``, and hashing refuses to start otherwise.
  (Measured with gevent: greenlets waiting for hashes while holding
  connections drained the pool, and requests that only wanted to read failed
  after the pool timeout.)
* With ``BCRYPT_IN_THREADPOOL`` (gevent), hashing runs on one native thread per
  process at a lower CPU priority, so the other greenlets keep running (bcrypt
  releases the GIL), and a herd of logins queues for that thread instead of
  taking the cores from the requests that are cheap to serve.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from flask import current_app

from .extensions import bcrypt, db

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# Niceness of the hashing thread: it gets the CPU the rest leaves.
HASHING_NICENESS = 10


@cache
def _hashing_thread(pid: int):
    """gevent's pool of one native thread, made in each process after the fork."""
    from gevent.threadpool import ThreadPool

    pool = ThreadPool(maxsize=1)
    pool.apply(lambda: os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASHING_NICENESS))
    return pool


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
    if current_app.config["BCRYPT_IN_THREADPOOL"]:
        return _hashing_thread(os.getpid()).apply(work, args)
    return work(*args)


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
