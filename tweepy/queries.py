"""Every read the pages make, returning plain rows (named tuples), never ORM objects.

Plain rows can be cached, shared between requests and rendered without lazy
loads. The ``@memoized`` reads are the ones the cache keeps; each names its own
entries (``newest_tweets_by.key(author_id)``), and ``writes.py`` forgets them
through those names whenever a write changes them.
"""

from __future__ import annotations

import heapq
import re
from datetime import datetime
from itertools import islice
from operator import attrgetter
from typing import NamedTuple

from flask import Flask, current_app
from sqlalchemy import bindparam, exists, func, select

from .cache import CacheKey, cache, memoized, row_type
from .extensions import db
from .models import Follow, ThrottleEvent, Tweet, User, lower_bytewise

# The names registration accepts: ASCII only, so lower-casing is plain ASCII too.
NAME = re.compile(r"[A-Za-z0-9_]{3,32}")


@row_type
class UserRow(NamedTuple):
    id: int
    name: str


@row_type
class Account(NamedTuple):
    id: int
    name: str


@row_type
class SessionRow(NamedTuple):
    """A live session: whose it is, and when it started (its absolute lifetime runs from then)."""

    user_id: int
    name: str
    started: datetime


@row_type
class Profile(NamedTuple):
    """What a profile says of its user besides their tweets."""

    joined: datetime
    tweets: int
    followers: int
    following: int
    follows_viewer: bool


@row_type
class TweetRow(NamedTuple):
    id: int
    author_id: int
    author_name: str
    text: str
    posted: datetime


def page_size() -> int:
    return current_app.config["PAGE_SIZE"]


# The reads the pages make, built once on the tables (as writes.py's statements are): SQLAlchemy
# reuses their compiled form as it is, where a statement built per call on the mapped classes
# pays for its building, its cache key and the ORM's execution besides: twice the read itself.
TWEETS, USERS, FOLLOWS, EVENTS = Tweet.__table__, User.__table__, Follow.__table__, ThrottleEvent.__table__
# A live session is an event of kind SESSION whose subject is the user id and the digest of the session id.
SESSION = "session"
SESSION_OF = (
    select(USERS.c.id, USERS.c.name, EVENTS.c.at)
    .join(EVENTS, (EVENTS.c.kind == SESSION) & (EVENTS.c.subject == bindparam("subject")))
    .where(USERS.c.id == bindparam("user_id"))
)
USER_NAMED = select(USERS.c.id, USERS.c.name).where(func.lower(USERS.c.name) == bindparam("name"))
SESSIONS_OF = select(EVENTS.c.subject, EVENTS.c.at).where(
    EVENTS.c.kind == SESSION, EVENTS.c.subject >= bindparam("first"), EVENTS.c.subject < bindparam("after")
)
CREDENTIALS = select(USERS.c.id, USERS.c.name, USERS.c.password_hash).where(
    func.lower(USERS.c.name) == bindparam("name")
)
EMAIL_TAKEN = select(USERS.c.id).where(USERS.c.email == bindparam("email"))
FOLLOWED_BY = select(FOLLOWS.c.followed_id).where(FOLLOWS.c.follower_id == bindparam("user_id"))
USERS_PAGE = select(USERS.c.id, USERS.c.name).order_by(USERS.c.id).limit(bindparam("size")).offset(bindparam("skip"))
USERS_BEFORE = select(func.count()).select_from(USERS).where(USERS.c.id < bindparam("user_id"))
# A profile's counts, each one range of an index (tweets by author; follows by followed; follows by follower).
PROFILE = select(
    USERS.c.created,
    select(func.count()).where(TWEETS.c.author_id == bindparam("user_id")).scalar_subquery(),
    select(func.count()).where(FOLLOWS.c.followed_id == bindparam("user_id")).scalar_subquery(),
    select(func.count()).where(FOLLOWS.c.follower_id == bindparam("user_id")).scalar_subquery(),
    exists().where(FOLLOWS.c.follower_id == bindparam("user_id"), FOLLOWS.c.followed_id == bindparam("viewer_id")),
).where(USERS.c.id == bindparam("user_id"))


def _people_page(side, other_side):
    """A page of the users on ``side`` of the follows whose ``other_side`` is the user, in id order after ``after``."""
    return (
        select(USERS.c.id, USERS.c.name)
        .join(FOLLOWS, side == USERS.c.id)
        .where(other_side == bindparam("user_id"), side > bindparam("after"))
        .order_by(side)
        .limit(bindparam("size"))
    )


FOLLOWERS_PAGE = _people_page(FOLLOWS.c.follower_id, FOLLOWS.c.followed_id)
FOLLOWING_PAGE = _people_page(FOLLOWS.c.followed_id, FOLLOWS.c.follower_id)


def _names_from():
    """A page of the users whose lower-cased name lies in [prefix, past_prefix), in name order past ``after``."""
    key = lower_bytewise(USERS.c.name)
    return (
        select(USERS.c.id, USERS.c.name)
        .where(key >= bindparam("prefix"), key < bindparam("past_prefix"), key > bindparam("after"))
        .order_by(key)
        .limit(bindparam("size"))
    )


NAMES_FROM = _names_from()
RECENT_EVENTS = (
    select(func.count())
    .select_from(EVENTS)
    .where(
        EVENTS.c.kind == bindparam("kind"), EVENTS.c.subject == bindparam("subject"), EVENTS.c.at >= bindparam("since")
    )
)


def _tweets_page(authors) -> tuple:
    """The newest page of the authors' tweets, and the page older than ``before``."""
    newest = (
        select(TWEETS.c.id, TWEETS.c.author_id, USERS.c.name, TWEETS.c.text, TWEETS.c.posted)
        .join(USERS, USERS.c.id == TWEETS.c.author_id)
        .where(authors)
        .order_by(TWEETS.c.id.desc())
        .limit(bindparam("size"))
    )
    return newest, newest.where(TWEETS.c.id < bindparam("before"))


# One's own tweets and those of whom one follows (minitwit's timeline), and one author's.
TIMELINE_NEWEST, TIMELINE_OLDER = _tweets_page(
    TWEETS.c.author_id.in_(FOLLOWED_BY.union_all(select(bindparam("user_id", type_=FOLLOWS.c.followed_id.type))))
)
BY_AUTHOR_NEWEST, BY_AUTHOR_OLDER = _tweets_page(TWEETS.c.author_id == bindparam("user_id"))


def _tweet_rows(newest, older, user_id: int, before: int | None) -> tuple[TweetRow, ...]:
    if before is None:
        rows = db.session.execute(newest, {"user_id": user_id, "size": page_size()})
    else:
        rows = db.session.execute(older, {"user_id": user_id, "size": page_size(), "before": before})
    # Fetched at once: one call into the driver for the page, not one a row.
    return tuple(TweetRow(*row) for row in rows.all())


def session_subject(user_id: int, digest: str) -> str:
    """Where a session is kept: its user (so all of one user's sessions are one range) and its digest."""
    return f"{user_id}:{digest}"


@memoized("session", at_once=True)
def session_of(user_id: int, digest: str) -> SessionRow | None:
    """The live session of this user with this digest of its id, read on every request of a logged-in
    person (cached where a log out is seen everywhere at once); None once it ended."""
    subject = session_subject(user_id, digest)
    row = db.session.execute(SESSION_OF, {"user_id": user_id, "subject": subject}).one_or_none()
    return SessionRow(*row) if row else None


def sessions_of(user_id: int) -> list[tuple[str, datetime]]:
    """The digest of each of a user's sessions, and when it started (for writes ending them; never cached)."""
    # One range of the (kind, subject) index: ";" is the character after ":".
    rows = db.session.execute(SESSIONS_OF, {"first": session_subject(user_id, ""), "after": f"{user_id};"})
    return [(subject.partition(":")[2], started) for subject, started in rows]


def is_possible_name(name: str) -> bool:
    """Whether someone could have registered this name; no other name is ever looked up."""
    return NAME.fullmatch(name) is not None


def _canonical_name(name: str) -> tuple[str]:
    # Checked before lower-casing: "\u212a".lower() is an ASCII "k".
    return (name.lower() if is_possible_name(name) else "",)


@memoized("user_named", canonical=_canonical_name)
def user_named(name: str) -> UserRow | None:
    """The user of this name, whatever its case (the read lower-cases it, for the call and the key)."""
    if not name:
        return None
    row = db.session.execute(USER_NAMED, {"name": name}).one_or_none()
    return UserRow(*row) if row else None


def credentials_of(name: str) -> tuple[Account, str] | None:
    """The account and its password hash, for logging in (never cached)."""
    if not is_possible_name(name):
        return None
    row = db.session.execute(CREDENTIALS, {"name": name.lower()}).one_or_none()
    return (Account(row.id, row.name), row.password_hash) if row else None


def recent_events(kind: str, subject: str, since: datetime) -> int:
    """How many throttle events of this kind this subject had since then (never cached: it is a count of attempts)."""
    return db.session.scalar(RECENT_EVENTS, {"kind": kind, "subject": subject, "since": since})


def email_taken(email: str) -> bool:
    return db.session.scalar(EMAIL_TAKEN, {"email": email.lower()}) is not None


@memoized("following")
def following_of(user_id: int) -> frozenset[int]:
    return frozenset(db.session.scalars(FOLLOWED_BY, {"user_id": user_id}))


def tweets_by(author_id: int, before: int | None = None) -> tuple[TweetRow, ...]:
    """A profile page: the author's tweets, newest first, older than ``before``."""
    if before is None:
        return newest_tweets_by(author_id)
    return _tweet_rows(BY_AUTHOR_NEWEST, BY_AUTHOR_OLDER, author_id, before)


@memoized("newest_tweets_by")
def newest_tweets_by(author_id: int) -> tuple[TweetRow, ...]:
    """The first page of a profile, and the piece of every follower's timeline that is this author's."""
    return _tweet_rows(BY_AUTHOR_NEWEST, BY_AUTHOR_OLDER, author_id, None)


def newest_tweets_with(
    page: tuple[TweetRow, ...], tweet_id: int, text: str, posted: datetime
) -> tuple[TweetRow, ...] | None:
    """An author's ``newest_tweets_by`` page once they posted a tweet, made from the page before it (ids grow,
    so the new tweet comes first), or None where that cannot be told: an empty page does not name its author,
    and a page that already holds the tweet was not the one before it."""
    if not page or page[0].id >= tweet_id:
        return None
    newest = page[0]
    return (TweetRow(tweet_id, newest.author_id, newest.author_name, text, posted), *page)[: page_size()]


def timeline_of(user_id: int, before: int | None = None) -> tuple[TweetRow, ...]:
    """One's own tweets and those of whom one follows, newest first (minitwit's timeline)."""
    if before is None:
        return current_app.extensions[FIRST_TIMELINE_PAGE](user_id)
    return _tweet_rows(TIMELINE_NEWEST, TIMELINE_OLDER, user_id, before)


def _timeline_queried(user_id: int) -> tuple[TweetRow, ...]:
    """The first page of a timeline, in one query."""
    return _tweet_rows(TIMELINE_NEWEST, TIMELINE_OLDER, user_id, None)


def _timeline_merged_from_author_pages(user_id: int) -> tuple[TweetRow, ...]:
    """The same first page, merged from each author's cached newest page.

    A new tweet then invalidates one entry (its author's) instead of the
    timelines of all their followers. The rows are the ones ``timeline_of``'s
    query returns (a test compares them).
    """
    size = page_size()

    def merged() -> tuple[tuple[TweetRow, ...], list[CacheKey]]:
        authors = following_of(user_id) | {user_id}
        pages = newest_tweets_by.many((author,) for author in authors)
        rows = tuple(islice(heapq.merge(*pages, key=attrgetter("id"), reverse=True), size))
        return rows, [following_of.key(user_id), *(newest_tweets_by.key(author) for author in authors)]

    # Until one of the pages changes, or whom the user follows, the merge is the same: kept, not redone,
    # and found without looking up its twenty-odd pages.
    return cache().derived_from_keys(("timeline", user_id, size), merged)


# A page past the last one is empty and not kept: its number is the client's choice.
@memoized("users_page", keep=bool)
def users_page(page: int) -> tuple[UserRow, ...]:
    """Page ``page`` (from 1) of all users in the order they joined."""
    size = page_size()
    rows = db.session.execute(USERS_PAGE, {"size": size, "skip": (page - 1) * size}).all()
    return tuple(UserRow(*row) for row in rows)


def profile_of(user_id: int, viewer_id: int | None) -> Profile | None:
    """A profile's counts, counted afresh, and whether the user follows the viewer.

    Never cached: only the profile page shows them, so no write has a key more to forget and
    the protocol's writes cost what they did; and a count read now cannot drift.
    """
    row = db.session.execute(PROFILE, {"user_id": user_id, "viewer_id": viewer_id or 0}).one_or_none()
    return Profile(*row) if row else None


def followers_of(user_id: int, after: int = 0) -> tuple[UserRow, ...]:
    """A page of who follows the user, by id from ``after`` on (never cached, as ``profile_of``)."""
    rows = db.session.execute(FOLLOWERS_PAGE, {"user_id": user_id, "after": after, "size": page_size()})
    return tuple(UserRow(*row) for row in rows.all())


def followed_by(user_id: int, after: int = 0) -> tuple[UserRow, ...]:
    """A page of whom the user follows, by id from ``after`` on (never cached, as ``profile_of``)."""
    rows = db.session.execute(FOLLOWING_PAGE, {"user_id": user_id, "after": after, "size": page_size()})
    return tuple(UserRow(*row) for row in rows.all())


# Past every character a name can hold once lower-cased ([0-9_a-z]), in code point order.
PAST_NAME_CHARACTERS = "\x7f"
NAME_PREFIX = re.compile(r"[A-Za-z0-9_]{1,32}")


def users_named_from(prefix: str, after: str = "") -> tuple[UserRow, ...]:
    """A page of the users whose name starts with ``prefix``, whatever its case, in name order past ``after``.

    A range of the lower-cased names, so an underscore is an underscore (no LIKE, no wildcard to
    escape); a prefix no name can start with finds nobody without asking the database. Never
    cached: the prefix is whatever a visitor types.
    """
    if NAME_PREFIX.fullmatch(prefix) is None:
        return ()
    prefix = prefix.lower()
    after = after.lower() if is_possible_name(after) else ""
    bounds = {"prefix": prefix, "past_prefix": prefix + PAST_NAME_CHARACTERS, "after": after}
    rows = db.session.execute(NAMES_FROM, {**bounds, "size": page_size()})
    return tuple(UserRow(*row) for row in rows.all())


def users_page_listing(user_id: int) -> int:
    """Which page of ``users_page`` lists this user (the one a registration changes)."""
    earlier = db.session.scalar(USERS_BEFORE, {"user_id": user_id})
    return earlier // page_size() + 1


# Where the app keeps the function that reads a timeline's first page (``init_app`` chooses it).
FIRST_TIMELINE_PAGE = "tweepy_first_timeline_page"


def init_app(app: Flask) -> None:
    """Choose once how a timeline's first page is read: merged from the authors' cached pages with
    TIMELINE_FROM_CACHED_PAGES, else in one query."""
    merged = app.config["TIMELINE_FROM_CACHED_PAGES"]
    app.extensions[FIRST_TIMELINE_PAGE] = _timeline_merged_from_author_pages if merged else _timeline_queried
