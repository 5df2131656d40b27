"""The device cookie: a signed note, left by a successful login, that this browser logged in to an account.

A login from such a device counts its failures against that device alone
(``throttle.begin_login``), so nobody else's guesses can lock the owner out
of their account; with ``HASH_KNOWN_DEVICES_FIRST`` it hashes in the lane
served first, and so does a registration from a browser holding a cookie of
any account (someone already using the site). The cookie names the account
and a random device id, is signed with the app's secret key (for this use
only), and says nothing a session would: it logs nobody in.
"""

from __future__ import annotations

import secrets

from flask import Flask, Response, current_app, request
from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE = "tweepy_device"
LIFETIME_S = 365 * 24 * 3600


def _serializer() -> URLSafeTimedSerializer:
    return current_app.extensions["tweepy_devices"]


def _cookie_name() -> str:
    # Over https, a name browsers take only from this very host, sent over https, for every path.
    return f"__Host-{COOKIE}" if current_app.config["SECURE_COOKIES"] else COOKIE


def _signed() -> tuple[str, str] | None:
    """The account and device id this browser's device cookie names, when it is one this app signed."""
    cookie = request.cookies.get(_cookie_name())
    if not cookie:
        return None
    try:
        account, device = _serializer().loads(cookie, max_age=LIFETIME_S)
    except (BadSignature, TypeError, ValueError):
        return None
    return (account, device) if isinstance(account, str) and isinstance(device, str) else None


def known_device(name: str) -> str | None:
    """The id of this browser's device if it logged in to the account named ``name`` before."""
    signed = _signed()
    return signed[1] if signed and signed[0] == name.lower() else None


def returning() -> bool:
    """Whether this browser logged in to any account here before: someone already using the site."""
    return _signed() is not None


def remember_device(response: Response, name: str) -> Response:
    """After a successful login: this browser is a device of the account (a new id for a new account)."""
    device = known_device(name) or secrets.token_urlsafe(12)
    config = current_app.config
    response.set_cookie(
        _cookie_name(),
        _serializer().dumps([name.lower(), device]),
        max_age=LIFETIME_S,
        secure=config["SECURE_COOKIES"],
        httponly=True,
        samesite="Lax",
        path="/",
    )
    return response


def init_app(app: Flask) -> None:
    app.extensions["tweepy_devices"] = URLSafeTimedSerializer(app.secret_key, salt="tweepy-device")
