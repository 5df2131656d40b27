"""Every change of state the app makes, each in one short transaction.

This is the one place that writes: each function commits its rows and, in the
same transaction, forgets the cached reads the write makes stale, through the
keys those reads name (see docs/caching.md); the busiest are one ``change``
each, which on PostgreSQL can be a single statement (``DB_ONE_STATEMENT_WRITES``).
Slow work (bcrypt) happens before, in the view, so no lock is held while it runs.
Refusals are ``errors.Refused``, which the site maps to HTTP statuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import and_, bindparam, delete, exists, insert, select
from sqlalchemy.exc import IntegrityError

from . import queries
from .cache import Patch, cache, change, forget
from .db_tuning import begin_writing
from .errors import Invalid, NotAllowed, NotFound, Taken
from .extensions import db
from .models import Follow, ThrottleEvent, Tweet, User, utcnow

# The statements every busy write sends, built once on the tables: SQLAlchemy then reuses their
# compiled form as it is, where a statement built per call, or on the mapped class (the ORM's
# bulk path), is built, keyed and looked up in the compiled cache on every call.
TWEETS, FOLLOWS, USERS = Tweet.__table__, Follow.__table__, User.__table__
# Each changes at most one row and returns it, as ``change`` asks (None: nothing changed).
NEW_TWEET = (
    insert(TWEETS)
    .values(author_id=bindparam("author_id"), text=bindparam("text"), posted=bindparam("posted"))
    .returning(TWEETS.c.id, TWEETS.c.posted)
)
THE_PAIR = and_(FOLLOWS.c.follower_id == bindparam("follower_id"), FOLLOWS.c.followed_id == bindparam("followed_id"))
NEW_FOLLOW = (
    insert(FOLLOWS)
    .from_select(
        ["follower_id", "followed_id"],
        select(
            bindparam("follower_id", type_=FOLLOWS.c.follower_id.type),
            bindparam("followed_id", type_=FOLLOWS.c.followed_id.type),
        ).where(~exists().where(THE_PAIR)),
    )
    .returning(FOLLOWS.c.follower_id)
)
GONE_FOLLOW = delete(FOLLOWS).where(THE_PAIR).returning(FOLLOWS.c.follower_id)
# Writes drop throttle events older than the longest window about once every this many events.
PRUNE_EVERY = 500
LONGEST_WINDOW = timedelta(days=1)


@contextmanager
def transaction(one_change: bool = False) -> Iterator[None]:
    """Commit everything done inside, or nothing; then let the cache know. With ``one_change``, what is
    done inside is one ``change``: where that commits by itself, nothing is sent around it."""
    alone = one_change and cache().changes_commit_alone
    try:
        if not alone:
            begin_writing()
        yield
        if not alone:
            db.session.commit()
    except BaseException:
        db.session.rollback()
        cache().after_rollback()
        raise
    cache().after_commit()


def register(name: str, email: str, password_hash: str) -> queries.Account:
    try:
        with transaction():
            user = User(name=name, email=email.lower(), password_hash=password_hash)
            db.session.add(user)
            db.session.flush()
            # Taken before the commit, which expires the object: read after it, they would cost a query.
            account = queries.Account(user.id, user.name)
            forget(queries.user_named.key(name), queries.users_page.key(queries.users_page_listing(user.id)))
    except IntegrityError:
        # Someone took the name or the email between the form's check and now.
        raise Taken("email" if queries.email_taken(email) else "name") from None
    return account


def note_attempts(attempts: list[tuple[str, str]]) -> list[int]:
    """Log an attempt (a throttle event) for each (kind, subject), committed before anyone counts them, so
    concurrent attempts see each other; now and then drop the events no window still needs. Their ids."""
    with transaction():
        ids = db.session.scalars(
            insert(ThrottleEvent).returning(ThrottleEvent.id), [{"kind": k, "subject": s} for k, s in attempts]
        ).all()
        if max(ids) // PRUNE_EVERY != (min(ids) - 1) // PRUNE_EVERY:
            old = (ThrottleEvent.kind != queries.SESSION) & (ThrottleEvent.at < utcnow() - LONGEST_WINDOW)
            db.session.execute(delete(ThrottleEvent).where(old))
    return ids


def withdraw_attempts(ids: list[int], cleared: tuple[str, str] | None = None) -> None:
    """Take back attempts that must not count (refused, or a login that succeeded), and with ``cleared``
    every earlier attempt of that (kind, subject) too."""
    with transaction():
        db.session.execute(delete(ThrottleEvent).where(ThrottleEvent.id.in_(ids)))
        if cleared is not None:
            kind, subject = cleared
            earlier = delete(ThrottleEvent).where(ThrottleEvent.kind == kind, ThrottleEvent.subject == subject)
            db.session.execute(earlier)


def start_session(user_id: int, digest: str, lifetime: timedelta) -> None:
    """A new session of this user, under the digest of its id. The user's sessions older than ``lifetime``,
    which can no longer be used, go: a user keeps at most the sessions of one lifetime's logins."""
    expired = [old for old, started in queries.sessions_of(user_id) if started < utcnow() - lifetime]
    with transaction():
        _end_sessions(user_id, expired)
        db.session.execute(
            insert(ThrottleEvent).values(kind=queries.SESSION, subject=queries.session_subject(user_id, digest))
        )


def end_session(user_id: int, digest: str) -> None:
    """Log out this device: every copy of its cookie stops working, and no other session."""
    with transaction():
        _end_sessions(user_id, [digest])


def end_all_sessions(user_id: int) -> None:
    """Log out everywhere: every session of this user ends."""
    with transaction():
        _end_sessions(user_id, [digest for digest, _started in queries.sessions_of(user_id)])


def _end_sessions(user_id: int, digests: list[str]) -> None:
    """Within a transaction: these sessions end, and so do their cached reads."""
    if not digests:
        return
    subjects = [queries.session_subject(user_id, digest) for digest in digests]
    db.session.execute(
        delete(ThrottleEvent).where(ThrottleEvent.kind == queries.SESSION, ThrottleEvent.subject.in_(subjects))
    )
    for digest in digests:
        forget(queries.session_of.key(user_id, digest))


def post_tweet(author_id: int, text: str) -> int:
    # The author's page is the new tweet before what it held: made here, where the cache can tell what it
    # held is current, rather than read again from the database.
    page = Patch(
        queries.newest_tweets_by.key(author_id),
        lambda held, row: queries.newest_tweets_with(held, row[0], text, row[1]),
    )
    with transaction(one_change=True):
        tweet_id, _posted = change(NEW_TWEET, {"author_id": author_id, "text": text, "posted": utcnow()}, patch=page)
    return tweet_id


def delete_tweet(user_id: int, tweet_id: int) -> None:
    with transaction():
        author_id = db.session.scalar(select(Tweet.author_id).where(Tweet.id == tweet_id))
        if author_id is None:
            raise NotFound("No such tweet.")
        if author_id != user_id:
            raise NotAllowed("You can only delete your own tweets.")
        db.session.execute(delete(Tweet).where(Tweet.id == tweet_id))
        forget(queries.newest_tweets_by.key(author_id))


def follow(follower_id: int, followed_id: int) -> None:
    if follower_id == followed_id:
        raise Invalid("You cannot follow yourself.")
    pair = {"follower_id": follower_id, "followed_id": followed_id}
    # Whom the follower follows, changed in place: their next timeline merges without reading it again.
    following = Patch(queries.following_of.key(follower_id), lambda held, _row: held | {followed_id})
    try:
        with transaction(one_change=True):
            change(NEW_FOLLOW, pair, patch=following)
    except IntegrityError:
        pass  # a concurrent request of the same user followed first: the end state is the same


def unfollow(follower_id: int, followed_id: int) -> None:
    if follower_id == followed_id:
        raise Invalid("You cannot unfollow yourself.")
    pair = {"follower_id": follower_id, "followed_id": followed_id}
    following = Patch(queries.following_of.key(follower_id), lambda held, _row: held - {followed_id})
    with transaction(one_change=True):
        change(GONE_FOLLOW, pair, patch=following)
