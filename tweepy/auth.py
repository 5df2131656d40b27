"""Registering, logging in and out (Flask-Login keeps who is logged in, in the signed session).

Each log in starts a session of its own: a random id, carried by the cookie
and kept on the server only as a digest (``writes.start_session``). Logging
out ends this device's session, and every copy of its cookie with it; "log
out everywhere" ends all of the user's. A session lives ``SESSION_LIFETIME_S``
from its log in at most, and ends after ``SESSION_IDLE_S`` without a request:
its cookie is signed again (never written to the database) when it is older
than ``RENEW_EVERY`` of the idle time, and Flask refuses a cookie signed longer
ago than that idle time. The CSRF token is replaced at log in and log out, so
a token seen before cannot be used after.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC, timedelta

from flask import Blueprint, current_app, flash, redirect, render_template, request, session, url_for
from flask_login import UserMixin, current_user, login_user, logout_user

from . import devices, queries, site, throttle, writes
from .errors import Busy, Taken, TooMany
from .extensions import login_manager
from .forms import LoginForm, RegisterForm
from .navigation import go_back
from .passwords import connection_given_back, hash_password, password_matches, refuse_if_busy

bp = Blueprint("auth", __name__)

# A cookie is signed again when a request finds it older than this share of the idle time.
RENEW_EVERY = 1 / 24
SEEN = "seen"  # in the session: when its cookie was last signed again


class CurrentUser(UserMixin):
    """Who is logged in: a plain row of their session, loaded (and cached) on each request."""

    def __init__(self, user_id: int, name: str, session_id: str) -> None:
        self.id = user_id
        self.name = name
        self.session_id = session_id

    def get_id(self) -> str:
        # What the session cookie carries: the user, and the id of this session.
        return f"{self.id}.{self.session_id}"


def digest_of(session_id: str) -> str:
    # The database and the cache know a session only by this: reading them gives no cookie.
    return hashlib.sha256(session_id.encode()).hexdigest()[:40]


@login_manager.user_loader
def load_user(cookie_id: str) -> CurrentUser | None:
    user_id, _, session_id = cookie_id.partition(".")
    if not (user_id.isdigit() and session_id):
        return None
    # A log out ends every copy of the cookie at once: the read is cached only where every process sees
    # its eviction at once.
    found = queries.session_of(int(user_id), digest_of(session_id))
    config = current_app.config
    now = int(time.time())
    if found is None or now - found.started.replace(tzinfo=UTC).timestamp() > config["SESSION_LIFETIME_S"]:
        return None  # logged out since this cookie was issued, or too old
    if now - session.get(SEEN, 0) > config["SESSION_IDLE_S"] * RENEW_EVERY:
        session[SEEN] = now  # the cookie is signed again, and lives another idle time
    return CurrentUser(found.user_id, found.name, session_id)


def start_session(account: queries.Account) -> None:
    session.pop("csrf_token", None)  # a new token for the new session
    session_id = secrets.token_urlsafe(32)
    lifetime = timedelta(seconds=current_app.config["SESSION_LIFETIME_S"])
    writes.start_session(account.id, digest_of(session_id), lifetime)
    session.permanent = True  # the cookie outlives the browser, for the idle time
    session[SEEN] = int(time.time())
    login_user(CurrentUser(account.id, account.name, session_id))


def refused_form(template: str, form, field, refusal: TooMany):
    """The form again, saying why it was refused and when to try again (429, or 503 when busy)."""
    field.errors = [*field.errors, str(refusal)]  # a tuple until the form is validated
    return render_template(template, form=form), site.status_of(refusal), site.retry_after(refusal)


@bp.route("/", methods=["GET", "POST"])
def login():
    if current_user.is_authenticated:
        return redirect(url_for("tweets.timeline"), code=303)
    form = LoginForm(next=request.args.get("next"))
    if not form.validate_on_submit():
        return render_template("login.html", form=form), 400 if request.method == "POST" else 200
    name = form.name.data
    device = devices.known_device(name)
    try:
        refuse_if_busy(known_device=device is not None)
        attempt = throttle.begin_login(name, throttle.client_address(), device)
    except TooMany as refusal:
        return refused_form("login.html", form, form.password, refusal)
    found = queries.credentials_of(name)
    account, password_hash = found if found else (None, None)
    try:
        with connection_given_back():
            matches = password_matches(password_hash, form.password.data, known_device=device is not None)
    except Busy as busy:
        attempt.withdraw()  # never tried
        return refused_form("login.html", form, form.password, busy)
    if not matches:
        form.password.errors.append("Wrong name or password.")
        return render_template("login.html", form=form), 401
    attempt.succeeded()
    start_session(account)
    return devices.remember_device(go_back(form.next.data, "tweets.timeline"), account.name)


@bp.route("/register/", methods=["GET", "POST"])
def register():
    if current_user.is_authenticated:
        return redirect(url_for("tweets.timeline"), code=303)
    form = RegisterForm()
    if form.is_submitted():
        # Counted before the form is checked: whether a name or email is taken is an answer too.
        try:
            throttle.begin_registration(throttle.client_address())
        except TooMany as refusal:
            return refused_form("register.html", form, form.name, refusal)
    if form.validate_on_submit():
        try:
            with connection_given_back():
                password_hash = hash_password(form.password.data, returning=devices.returning())
        except Busy as busy:
            return refused_form("register.html", form, form.password, busy)
        try:
            account = writes.register(form.name.data, form.email.data, password_hash)
        except Taken as taken:
            getattr(form, taken.field).errors.append(str(taken))
        else:
            start_session(account)
            flash(f"Welcome to tweepy, {account.name}!")
            return redirect(url_for("tweets.timeline"), code=303)
    return render_template("register.html", form=form), 400 if request.method == "POST" else 200


@bp.post("/logout/")
def logout():
    # CSRF-checked like every POST, so no other site can log people out.
    if current_user.is_authenticated:
        writes.end_session(current_user.id, digest_of(current_user.session_id))
    return _logged_out()


@bp.post("/logout/everywhere")
def logout_everywhere():
    if current_user.is_authenticated:
        writes.end_all_sessions(current_user.id)
    return _logged_out()


def _logged_out():
    logout_user()
    session.pop("csrf_token", None)
    session.pop(SEEN, None)
    return redirect(url_for("auth.login"), code=303)
