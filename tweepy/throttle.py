"""Limits on failed logins and registrations, checked before any password is hashed.

A hash costs about a quarter of a second of CPU at bcrypt's default cost, so
a client that may try passwords without limit can both guess them and keep
the machine busy. A failed login counts against the account and against the
client's address; a registration against the address. Successful logins
never count. The counts are rows of ``throttle_events`` (written by
``writes.py``), so every process, and every node sharing the database, sees
the same ones; they are checked with one indexed count each.

Addresses in ``UNTHROTTLED_ADDRESSES`` are counted like any other but never
refused: a load generator plays thousands of people from one address. The
per-account limit holds for everyone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from flask import current_app, request

from . import queries
from .errors import TooMany
from .models import utcnow

FAILED_LOGIN_BY_ACCOUNT = "login-account"
FAILED_LOGIN_BY_ADDRESS = "login-address"
REGISTRATION = "register-address"
# Writes drop events older than the longest window about once every this many events.
PRUNE_EVERY = 500
LONGEST_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class Limit:
    kind: str
    most: int  # attempts allowed in the window; the next one is refused
    window: timedelta
    message: str


def _limits() -> dict[str, Limit]:
    config = current_app.config
    login_window = timedelta(seconds=config["LOGIN_FAILURE_WINDOW_S"])
    return {
        FAILED_LOGIN_BY_ACCOUNT: Limit(
            FAILED_LOGIN_BY_ACCOUNT,
            config["LOGIN_FAILURES_PER_ACCOUNT"],
            login_window,
            "Too many failed logins for this account.",
        ),
        FAILED_LOGIN_BY_ADDRESS: Limit(
            FAILED_LOGIN_BY_ADDRESS,
            config["LOGIN_FAILURES_PER_ADDRESS"],
            login_window,
            "Too many failed logins from your address.",
        ),
        REGISTRATION: Limit(
            REGISTRATION,
            config["REGISTRATIONS_PER_ADDRESS"],
            timedelta(seconds=config["REGISTRATION_WINDOW_S"]),
            "Too many new accounts from your address.",
        ),
    }


def client_address() -> str:
    # nginx passes the client's own address (uwsgi_params' REMOTE_ADDR); the development server sees it directly.
    return (request.remote_addr or "unknown")[:64]


def _check(kind: str, subject: str, exempt: bool = False) -> None:
    if exempt:
        return
    limit = _limits()[kind]
    if queries.recent_events(kind, subject, utcnow() - limit.window) >= limit.most:
        minutes = math.ceil(limit.window.total_seconds() / 60)
        raise TooMany(f"{limit.message} Try again in {minutes} minutes.", retry_after=int(limit.window.total_seconds()))


def _exempt(address: str) -> bool:
    return address in {a.strip() for a in current_app.config["UNTHROTTLED_ADDRESSES"].split(",") if a.strip()}


def check_login(name: str, address: str) -> None:
    """Refuse (``TooMany``) a login whose account or address failed too often lately."""
    if queries.is_possible_name(name):
        _check(FAILED_LOGIN_BY_ACCOUNT, name.lower())
    _check(FAILED_LOGIN_BY_ADDRESS, address, exempt=_exempt(address))


def check_registration(address: str) -> None:
    """Refuse (``TooMany``) a registration from an address that registered too often lately."""
    _check(REGISTRATION, address, exempt=_exempt(address))
