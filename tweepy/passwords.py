"""Hashing and checking passwords with bcrypt, at the configured cost.

bcrypt is the costliest thing the app does (about a quarter of a second of CPU
at cost 12), on purpose. Under gevent a hash would stop every other greenlet of
the process for that long, so with ``BCRYPT_IN_THREADPOOL`` it runs in gevent's
pool of native threads instead; bcrypt releases the GIL while it works.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import cache
from typing import Any

from flask import current_app

from .extensions import bcrypt

# bcrypt reads at most 72 bytes; longer passwords are refused at registration
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72


def _off_the_event_loop(work: Callable[..., Any], *args: Any) -> Any:
    if current_app.config["BCRYPT_IN_THREADPOOL"]:
        import gevent

        return gevent.get_hub().threadpool.apply(work, args)
    return work(*args)


def _cost() -> int:
    return current_app.config["BCRYPT_LOG_ROUNDS"]


def hash_password(password: str) -> str:
    return _off_the_event_loop(bcrypt.generate_password_hash, password, _cost()).decode()


def password_matches(password_hash: str | None, password: str) -> bool:
    """Check a password; with no user (``None``) spend the same time and say no."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    # Checking against a throwaway hash keeps "no such user" as slow as "wrong password".
    matches = _off_the_event_loop(bcrypt.check_password_hash, password_hash or _decoy_hash(_cost()), password)
    return matches and password_hash is not None


@cache
def _decoy_hash(cost: int) -> str:
    return bcrypt.generate_password_hash(secrets.token_hex(16), cost).decode()
