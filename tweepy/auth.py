"""Registering, logging in and out (Flask-Login keeps who is logged in, in the signed session).

A session names the user and their session epoch; logging out moves the
epoch on, so every copy of the cookie ends with it. The CSRF token is
replaced at log in and log out, so a token seen before cannot be used after.
"""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, session, url_for
from flask_login import UserMixin, current_user, login_user, logout_user

from . import devices, queries, site, throttle, writes
from .cache import cache
from .errors import Busy, Taken, TooMany
from .extensions import login_manager
from .forms import LoginForm, RegisterForm
from .navigation import go_back
from .passwords import connection_given_back, hash_password, password_matches

bp = Blueprint("auth", __name__)


class CurrentUser(UserMixin):
    """Who is logged in: a plain row, loaded (and cached) by id on each request."""

    def __init__(self, account: queries.Account) -> None:
        self.id = account.id
        self.name = account.name
        self.session_epoch = account.session_epoch

    def get_id(self) -> str:
        # What the session cookie carries: the user, and the epoch it was issued in.
        return f"{self.id}.{self.session_epoch}"


@login_manager.user_loader
def load_user(session_id: str) -> CurrentUser | None:
    user_id, _, epoch = session_id.partition(".")
    if not (user_id.isdigit() and epoch.isdigit()):
        return None
    # A log out must end every copy of the cookie at once: from the cache only when every
    # process sees its eviction at once, else from the database.
    read = queries.account_of if cache().fresh_everywhere else queries.account_of.uncached
    account = read(int(user_id))
    if account is None or account.session_epoch != int(epoch):
        return None  # logged out since this cookie was issued
    return CurrentUser(account)


def start_session(account: queries.Account) -> None:
    session.pop("csrf_token", None)  # a new token for the new session
    login_user(CurrentUser(account))


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
    try:
        attempt = throttle.begin_login(name, throttle.client_address(), devices.known_device(name))
    except TooMany as refusal:
        return refused_form("login.html", form, form.password, refusal)
    found = queries.credentials_of(name)
    account, password_hash = found if found else (None, None)
    try:
        with connection_given_back():
            matches = password_matches(password_hash, form.password.data)
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
                password_hash = hash_password(form.password.data)
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
        writes.end_sessions(current_user.id)
    logout_user()
    session.pop("csrf_token", None)
    return redirect(url_for("auth.login"), code=303)
