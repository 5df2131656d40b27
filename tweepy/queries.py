"""Every read the pages make, returning plain rows (named tuples), never ORM objects.

Plain rows can be cached, shared between requests and rendered without lazy
loads. The ``@memoized`` reads are the ones the cache stage keeps; the keys they
are kept under are forgotten by ``writes.py`` whenever a write changes them.
"""

from __future__ import annotations

import heapq
from datetime import datetime
from itertools import islice
from operator import attrgetter
from typing import NamedTuple

from flask import current_app
from sqlalchemy import func, literal, select

from .cache import cache, memoized
from .extensions import db
from .models import Follow, Tweet, User


class UserRow(NamedTuple):
    id: int
    name: str


class TweetRow(NamedTuple):
    id: int
    author_id: int
    author_name: str
    text: str
    posted: datetime


def page_size() -> int:
    return current_app.config["PAGE_SIZE"]


_TWEET_COLUMNS = (Tweet.id, Tweet.author_id, User.name, Tweet.text, Tweet.posted)


def _tweet_rows(query) -> tuple[TweetRow, ...]:
    return tuple(TweetRow(*row) for row in db.session.execute(query))


@memoized("user")
def user_by_id(user_id: int) -> UserRow | None:
    row = db.session.execute(select(User.id, User.name).where(User.id == user_id)).one_or_none()
    return UserRow(*row) if row else None


def user_named(name: str) -> UserRow | None:
    return _user_named(name.lower())


@memoized("user_named")
def _user_named(lowered_name: str) -> UserRow | None:
    row = db.session.execute(
        select(User.id, User.name).where(func.lower(User.name) == lowered_name)
    ).one_or_none()
    return UserRow(*row) if row else None


def credentials_of(name: str) -> tuple[UserRow, str] | None:
    """The user and their password hash, for logging in (never cached)."""
    row = db.session.execute(
        select(User.id, User.name, User.password_hash).where(func.lower(User.name) == name.lower())
    ).one_or_none()
    return (UserRow(row.id, row.name), row.password_hash) if row else None


def email_taken(email: str) -> bool:
    return db.session.scalar(select(User.id).where(User.email == email.lower())) is not None


@memoized("following")
def following_of(user_id: int) -> frozenset[int]:
    return frozenset(db.session.scalars(select(Follow.followed_id).where(Follow.follower_id == user_id)))


def tweets_by(author_id: int, before: int | None = None) -> tuple[TweetRow, ...]:
    """A profile page: the author's tweets, newest first, older than ``before``."""
    if before is None:
        return latest_tweets_by(author_id)
    return _tweets_by(author_id, before)


@memoized("tweets_by")
def latest_tweets_by(author_id: int) -> tuple[TweetRow, ...]:
    return _tweets_by(author_id, None)


def _tweets_by(author_id: int, before: int | None) -> tuple[TweetRow, ...]:
    query = select(*_TWEET_COLUMNS).join(User, User.id == Tweet.author_id).where(Tweet.author_id == author_id)
    if before is not None:
        query = query.where(Tweet.id < before)
    return _tweet_rows(query.order_by(Tweet.id.desc()).limit(page_size()))


def timeline_of(user_id: int, before: int | None = None) -> tuple[TweetRow, ...]:
    """One's own tweets and those of whom one follows, newest first (minitwit's timeline)."""
    if before is None and cache().enabled:
        # Built from cached per-author pages: a new tweet then invalidates one
        # entry (its author's) instead of the timelines of all their followers.
        authors = following_of(user_id) | {user_id}
        pages = [latest_tweets_by(author) for author in authors]
        return tuple(islice(heapq.merge(*pages, key=attrgetter("id"), reverse=True), page_size()))

    authors = select(Follow.followed_id).where(Follow.follower_id == user_id).union_all(select(literal(user_id)))
    query = select(*_TWEET_COLUMNS).join(User, User.id == Tweet.author_id).where(Tweet.author_id.in_(authors))
    if before is not None:
        query = query.where(Tweet.id < before)
    return _tweet_rows(query.order_by(Tweet.id.desc()).limit(page_size()))


@memoized("users_page")
def users_page(page: int) -> tuple[UserRow, ...]:
    """Page ``page`` (from 1) of all users in the order they joined."""
    size = page_size()
    query = select(User.id, User.name).order_by(User.id).limit(size).offset((page - 1) * size)
    return tuple(UserRow(*row) for row in db.session.execute(query))


def page_of_user(user_id: int) -> int:
    """Which page of ``users_page`` lists this user."""
    earlier = db.session.scalar(select(func.count()).select_from(User).where(User.id < user_id))
    return earlier // page_size() + 1
