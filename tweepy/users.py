"""The list of users, profiles, following and unfollowing."""

from __future__ import annotations

from flask import Blueprint, abort, render_template
from flask_login import current_user, login_required

from . import queries, site, throttle, writes
from .forms import ActionForm
from .navigation import go_back
from .paging import is_full, older_tweets_url, page_arg, tweet_id_arg

bp = Blueprint("users", __name__, url_prefix="/users")


def _following() -> frozenset[int]:
    return queries.following_of(current_user.id) if current_user.is_authenticated else frozenset()


def _user_or_404(name: str) -> queries.UserRow:
    # No name holds a NUL (forms.no_nul), and PostgreSQL refuses even to look one up.
    user = None if "\x00" in name else queries.user_named(name)
    if user is None:
        abort(404, f"There is no user named {name!r}.")
    return user


@bp.get("/")
@login_required
def index():
    page = page_arg()
    users = queries.users_page(page)
    next_page = page + 1 if is_full(users) else None
    return render_template("users.html", users=users, page=page, next_page=next_page, following=_following())


@bp.get("/<name>/")
def profile(name: str):
    user = _user_or_404(name)
    before = tweet_id_arg("before")
    tweets = queries.tweets_by(user.id, before)
    older = older_tweets_url(tweets, f"{site.links()['users']}{user.name}/")
    return render_template("profile.html", user=user, tweets=tweets, older_url=older, following=_following())


@bp.post("/<name>/follow")
@login_required
def follow(name: str):
    user = _user_or_404(name)
    throttle.count_write("follows", current_user.id)
    writes.follow(current_user.id, user.id)
    return go_back(ActionForm().next.data, "users.profile", name=user.name)


@bp.post("/<name>/unfollow")
@login_required
def unfollow(name: str):
    user = _user_or_404(name)
    throttle.count_write("follows", current_user.id)
    writes.unfollow(current_user.id, user.id)
    return go_back(ActionForm().next.data, "users.profile", name=user.name)
