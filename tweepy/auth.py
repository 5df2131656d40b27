"""Registering, logging in and out (Flask-Login keeps who is logged in, in the signed session)."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask_login import UserMixin, current_user, login_user, logout_user

from . import queries, writes
from .errors import Taken
from .extensions import login_manager
from .forms import LoginForm, RegisterForm
from .navigation import go_back
from .passwords import connection_given_back, hash_password, password_matches

bp = Blueprint("auth", __name__)


class CurrentUser(UserMixin):
    """Who is logged in: a plain row, loaded (and cached) by id on each request."""

    def __init__(self, row: queries.UserRow) -> None:
        self.id = row.id
        self.name = row.name


@login_manager.user_loader
def load_user(user_id: str) -> CurrentUser | None:
    try:
        row = queries.user_by_id(int(user_id))
    except ValueError:
        return None
    return CurrentUser(row) if row else None


@bp.route("/", methods=["GET", "POST"])
def login():
    if current_user.is_authenticated:
        return redirect(url_for("tweets.timeline"), code=303)
    form = LoginForm(next=request.args.get("next"))
    if not form.validate_on_submit():
        return render_template("login.html", form=form), 400 if request.method == "POST" else 200
    found = queries.credentials_of(form.name.data)
    user, password_hash = found if found else (None, None)
    with connection_given_back():
        matches = password_matches(password_hash, form.password.data)
    if not matches:
        form.password.errors.append("Wrong name or password.")
        return render_template("login.html", form=form), 401
    login_user(CurrentUser(user))
    return go_back(form.next.data, "tweets.timeline")


@bp.route("/register/", methods=["GET", "POST"])
def register():
    if current_user.is_authenticated:
        return redirect(url_for("tweets.timeline"), code=303)
    form = RegisterForm()
    if form.validate_on_submit():
        with connection_given_back():
            password_hash = hash_password(form.password.data)
        try:
            user = writes.register(form.name.data, form.email.data, password_hash)
        except Taken as taken:
            getattr(form, taken.field).errors.append(str(taken))
        else:
            login_user(CurrentUser(user))
            flash(f"Welcome to tweepy, {user.name}!")
            return redirect(url_for("tweets.timeline"), code=303)
    return render_template("register.html", form=form), 400 if request.method == "POST" else 200


@bp.post("/logout/")
def logout():
    # CSRF-checked like every POST, so no other site can log people out.
    logout_user()
    return redirect(url_for("auth.login"), code=303)
