"""The list of users and finding someone in it, profiles, who follows whom, following and unfollowing."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request, url_for
from flask_login import current_user, login_required

from . import queries, site, throttle, writes
from .forms import ActionForm
from .navigation import go_back
from .paging import is_full, older_tweets_url, page_arg, tweet_id_arg, user_id_arg

bp = Blueprint("users", __name__, url_prefix="/users")


def _following() -> frozenset[int]:
    return queries.following_of(current_user.id) if current_user.is_authenticated else frozenset()


def _user_or_404(name: str) -> queries.UserRow:
    # No name holds a NUL (forms.no_nul), and PostgreSQL refuses even to look one up.
    user = None if "\x00" in name else queries.user_named(name)
    if user is None:
        abort(404, f"There is no user named {name!r}.")
    return user


# Longer than any name: such a query is refused before it is looked at.
LONGEST_QUERY = 32


@bp.get("/")
@login_required
def index():
    query = request.args.get("q", "").strip()
    if query:
        return _search(query)
    page = page_arg()
    users = queries.users_page(page)
    next_page = url_for("users.index", page=page + 1) if is_full(users) else None
    previous = url_for("users.index", page=page - 1) if page > 1 else None
    return render_template(
        "users.html", users=users, next_url=next_page, previous_url=previous, query="", following=_following()
    )


def _search(query: str):
    """The users whose name starts with ``query``, a page at a time (keyed by the last name shown)."""
    if len(query) > LONGEST_QUERY:
        abort(400, f"A name has at most {LONGEST_QUERY} characters: search for fewer.")
    after = request.args.get("after", "")
    if after and not queries.is_possible_name(after):
        abort(400, "'after' must be a name.")
    users = queries.users_named_from(query, after)
    next_page = url_for("users.index", q=query, after=users[-1].name) if is_full(users) else None
    return render_template(
        "users.html", users=users, next_url=next_page, previous_url=None, query=query, following=_following()
    )


@bp.get("/<name>/")
def profile(name: str):
    user = _user_or_404(name)
    before = tweet_id_arg("before")
    tweets = queries.tweets_by(user.id, before)
    older = older_tweets_url(tweets, f"{site.links()['users']}{user.name}/")
    viewer = current_user.id if current_user.is_authenticated else None
    about = queries.profile_of(user.id, viewer)
    if about is None:
        abort(404, f"There is no user named {name!r}.")  # gone between the two reads
    return render_template(
        "profile.html", user=user, about=about, tweets=tweets, older_url=older, following=_following()
    )


@bp.get("/<name>/followers/")
def followers(name: str):
    user = _user_or_404(name)
    return _people("followers", user, queries.followers_of(user.id, user_id_arg("after")))


@bp.get("/<name>/following/")
def following(name: str):
    user = _user_or_404(name)
    return _people("following", user, queries.followed_by(user.id, user_id_arg("after")))


def _people(listing: str, user: queries.UserRow, users: tuple[queries.UserRow, ...]):
    """A page of followers or followed, each with a follow button, and the link to the next page."""
    next_page = url_for(f"users.{listing}", name=user.name, after=users[-1].id) if is_full(users) else None
    return render_template(
        "people.html", listing=listing, user=user, users=users, next_url=next_page, following=_following()
    )


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
