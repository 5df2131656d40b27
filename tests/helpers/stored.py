"""Rows put in or read out of the database directly, for tests that set up data
faster than HTTP could, or check what a request really stored.

Rows written here bypass ``writes.py`` and so the cache invalidation log: use
them before any cached read, or with ``CACHE=none``.
"""

from __future__ import annotations

import bcrypt
from sqlalchemy import func, insert, select
from sqlalchemy.orm import aliased

from tweepy import queries
from tweepy.extensions import db
from tweepy.models import Follow, ThrottleEvent, Tweet, User

# Only to keep the suite quick; the app's default cost is 12, and the benchmark runs at it.
FAST_BCRYPT = 4
# Users made here can log in with this password (hashed once, at the lowest cost).
PASSWORD = "correct horse"
PASSWORD_HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(FAST_BCRYPT)).decode()


def add_users(app, *names: str) -> list[int]:
    with app.app_context():
        ids = db.session.scalars(
            insert(User).returning(User.id),
            [{"name": n, "email": f"{n.lower()}@example.com", "password_hash": PASSWORD_HASH} for n in names],
        ).all()
        db.session.commit()
        return sorted(ids)


def add_tweets(app, author_id: int, *texts: str) -> list[int]:
    """Tweets by one author, in this order (so with growing ids)."""
    with app.app_context():
        ids = [
            db.session.scalar(insert(Tweet).values(author_id=author_id, text=text).returning(Tweet.id))
            for text in texts
        ]
        db.session.commit()
        return ids


def add_follow(app, follower_id: int, followed_id: int) -> None:
    with app.app_context():
        db.session.execute(insert(Follow).values(follower_id=follower_id, followed_id=followed_id))
        db.session.commit()


def user_id(app, name: str) -> int | None:
    with app.app_context():
        return db.session.scalar(select(User.id).where(User.name == name))


def user_row(app, name: str) -> User | None:
    with app.app_context():
        user = db.session.scalar(select(User).where(User.name == name))
        if user is not None:
            db.session.expunge(user)
        return user


def tweets_by(app, name: str) -> list[str]:
    """The texts ``name`` has stored, oldest first."""
    with app.app_context():
        query = select(Tweet.text).join(User, User.id == Tweet.author_id).where(User.name == name)
        return list(db.session.scalars(query.order_by(Tweet.id)))


def follows(app) -> set[tuple[str, str]]:
    """Every (follower, followed) pair, by name."""
    follower, followed = aliased(User), aliased(User)
    with app.app_context():
        query = (
            select(follower.name, followed.name)
            .select_from(Follow)
            .join(follower, follower.id == Follow.follower_id)
            .join(followed, followed.id == Follow.followed_id)
        )
        return {tuple(row) for row in db.session.execute(query)}


def count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(select(func.count()).select_from(model))


def count_attempts(app) -> int:
    """Attempts to log in or register counted in the database (its throttle events, sessions left out)."""
    with app.app_context():
        counted = select(func.count()).select_from(ThrottleEvent).where(ThrottleEvent.kind != queries.SESSION)
        return db.session.scalar(counted)
