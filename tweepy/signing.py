"""What the app signs on every page: the session cookie and the forms' CSRF token.

Both are Flask's and Flask-WTF's own, unchanged in what they sign and check;
only the work around them is done less often:

* Flask builds the session's signing serializer twice a request (to read the
  cookie and to write it back); ``SessionInterface`` builds it once per
  secret key and keeps it (it holds no state between calls).
* Flask-WTF signs the session's CSRF token once a page, and the signature
  covers only that token and the time in whole seconds. ``page_token`` keeps
  each session's signed token for the rest of its second, so the pages of one
  second share one signature, and every token is still one Flask-WTF made
  and checks (valid for an hour, for that session only).
"""

from __future__ import annotations

import time

from flask import Flask, current_app, g, session
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import generate_csrf
from itsdangerous import URLSafeTimedSerializer

# Flask-WTF's names for the token: its key in the session, and where it keeps the signed one for the request.
TOKEN = "csrf_token"


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the signing serializer made once per secret key."""

    def __init__(self) -> None:
        self.kept: tuple[tuple, URLSafeTimedSerializer | None] | None = None

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer | None:
        keys = (app.secret_key, tuple(app.config["SECRET_KEY_FALLBACKS"] or ()))
        kept = self.kept
        if kept is None or kept[0] != keys:
            kept = self.kept = (keys, super().get_signing_serializer(app))
        return kept[1]


class SignedThisSecond:
    """Each session's signed CSRF token, for the current second only: a new second starts afresh,
    so what is kept is bounded by the sessions one second sees."""

    def __init__(self) -> None:
        self.second, self.tokens = 0, {}

    def get(self, raw: str, now: int) -> str | None:
        return self.tokens.get(raw) if now == self.second else None

    def keep(self, raw: str, now: int, signed: str) -> None:
        if now != self.second:
            self.second, self.tokens = now, {}
        self.tokens[raw] = signed


def page_token() -> str:
    """The CSRF token for this page's forms: Flask-WTF's, signed at most once a second per session."""
    if TOKEN in g or TOKEN not in session:
        return generate_csrf()  # already signed for this request, or a session that has no token yet
    kept: SignedThisSecond = current_app.extensions["tweepy_page_tokens"]
    raw, now = session[TOKEN], int(time.time())
    signed = kept.get(raw, now)
    if signed is None:
        signed = generate_csrf()
        kept.keep(raw, now, signed)
    else:
        # Where Flask-WTF looks first, so its own calls in this request (form.csrf_token) give the same token.
        setattr(g, TOKEN, signed)
    return signed


def init_app(app: Flask) -> None:
    """The session cookie: never read by scripts, not sent by other sites' forms, https-only when asked."""
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=app.config["SECURE_COOKIES"],
    )
    app.session_interface = SessionInterface()
    app.extensions["tweepy_page_tokens"] = SignedThisSecond()
