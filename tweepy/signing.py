"""What the app signs on every page: the session cookie and the forms' CSRF token.

Both are Flask's and Flask-WTF's own, unchanged in what they sign and check; only the work around
them is done less often. ``SessionInterface`` builds the cookie's signing serializer once per secret
key, and checks a cookie's signature once while it keeps what the cookie holds; ``page_token`` signs
each session's CSRF token once a minute rather than once a page.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import cachetools
from flask import Flask, Request, current_app, g, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask_wtf.csrf import generate_csrf
from itsdangerous import BadSignature, URLSafeTimedSerializer

# Flask-WTF's names for the token: its key in the session, and where it keeps the signed one for the request.
TOKEN = "csrf_token"

# Checked cookies kept per process: about 300 bytes each, and a session's older cookies leave first.
OPENED_COOKIES = 10_000
PLAIN = (str, int, float, bool, type(None))
# How long a session's signed CSRF token is shown again (Flask-WTF accepts one for an hour),
# and how many sessions' tokens a period keeps (about 200 bytes each) before it starts afresh.
TOKEN_PERIOD_S = 60
TOKENS_A_PERIOD = 10_000


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions: the signing serializer made once per secret key, and each
    cookie's signature checked once while it is kept (what it holds, and when it was signed).

    Flask builds the serializer twice a request (to read the cookie and to write it back); it holds
    no state between calls, so one per secret key serves every request. Flask checks the cookie's
    signature on every request, although a browser sends the very same cookie until its session
    changes: the same text is the same signature, so a kept cookie has only its age checked again.
    What a cookie holds is copied into each request's session, and only cookies of plain values are
    kept (flashed messages are a list, changed in place).
    """

    def __init__(self) -> None:
        self.kept: tuple[tuple, URLSafeTimedSerializer | None, cachetools.LRUCache] | None = None
        self.lock = threading.Lock()

    def _kept_for(self, app: Flask) -> tuple[tuple, URLSafeTimedSerializer | None, cachetools.LRUCache]:
        # A new secret key starts afresh: cookies are kept only under the keys that checked them.
        keys = (app.secret_key, tuple(app.config["SECRET_KEY_FALLBACKS"] or ()))
        kept = self.kept
        if kept is None or kept[0] != keys:
            kept = self.kept = (keys, super().get_signing_serializer(app), cachetools.LRUCache(OPENED_COOKIES))
        return kept

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer | None:
        return self._kept_for(app)[1]

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        _keys, serializer, opened = self._kept_for(app)
        cookie = request.cookies.get(self.get_cookie_name(app))
        if serializer is None or not cookie:
            return super().open_session(app, request)
        max_age = int(app.permanent_session_lifetime.total_seconds())
        with self.lock:
            known = opened.get(cookie)
        if known is not None and 0 <= int(time.time()) - known[1] <= max_age:  # itsdangerous' own test of age
            return self.session_class(known[0])
        try:  # a cookie not kept, or kept past its age: checked in full, as Flask does
            data, signed_at = serializer.loads(cookie, max_age=max_age, return_timestamp=True)
        except BadSignature:  # forged, altered or expired: an empty session, as Flask's own
            with self.lock:
                opened.pop(cookie, None)
            return self.session_class()
        if isinstance(data, dict) and all(isinstance(value, PLAIN) for value in data.values()):
            with self.lock:
                opened[cookie] = (data, int(signed_at.timestamp()))
        return self.session_class(data)


class SignedThisPeriod:
    """Each session's signed CSRF token, for the current period (``TOKEN_PERIOD_S``) only: a new
    period starts afresh, and so does one that has seen ``TOKENS_A_PERIOD`` sessions."""

    def __init__(self) -> None:
        self.period, self.tokens = -1, {}

    def get(self, raw: str, now: int) -> str | None:
        return self.tokens.get(raw) if now // TOKEN_PERIOD_S == self.period else None

    def keep(self, raw: str, now: int, signed: str) -> None:
        if now // TOKEN_PERIOD_S != self.period or len(self.tokens) >= TOKENS_A_PERIOD:
            self.period, self.tokens = now // TOKEN_PERIOD_S, {}
        self.tokens[raw] = signed


def page_token() -> str:
    """The CSRF token for this page's forms: Flask-WTF's, signed at most once a period per session.

    Flask-WTF's signature covers only the session's token and the time in whole seconds, so the pages
    of one period share one signature, and every token is still one Flask-WTF made and checks, for
    that session only. A page's token is at most a minute old when shown, so its forms work for at
    least 59 of Flask-WTF's 60 minutes.
    """
    if TOKEN in g:
        return generate_csrf()  # already signed for this request
    kept: SignedThisPeriod = current_app.extensions["tweepy_page_tokens"]
    now = int(time.time())
    signed = kept.get(session[TOKEN], now) if TOKEN in session else None
    if signed is None:
        signed = generate_csrf()  # which gives a session with no token its own first
        kept.keep(session[TOKEN], now, signed)
    else:
        # Where Flask-WTF looks first, so its own calls in this request (form.csrf_token) give the same token.
        setattr(g, TOKEN, signed)
    return signed


def init_app(app: Flask) -> None:
    """The session cookie: never read by scripts, not sent by other sites' forms, https-only when asked,
    and then named so that browsers take it only from this very host, over https, for every path."""
    if app.config["SECURE_COOKIES"]:
        app.config["SESSION_COOKIE_NAME"] = "__Host-session"
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=app.config["SECURE_COOKIES"],
        # A cookie signed longer ago than the idle time is refused; auth.py signs a session's again
        # now and then while it is used, not on every answer.
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=app.config["SESSION_IDLE_S"]),
        SESSION_REFRESH_EACH_REQUEST=False,
    )
    # Flask opens and saves every request's session through app.session_interface, its hook for
    # replacing how sessions are kept: ours signs and checks as Flask's does, with less work a request.
    app.session_interface = SessionInterface()
    app.extensions["tweepy_page_tokens"] = SignedThisPeriod()
