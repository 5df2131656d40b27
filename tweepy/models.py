"""The tables: users, their tweets, who follows whom, and the logs the app keeps for itself.

Indexes are declared next to the columns they serve; migrations create them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, func
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.functions import GenericFunction

from .extensions import db

# Ids are 64-bit (paging accepts up to 2**63 - 1): BIGINT on PostgreSQL, whose
# INTEGER stops at 2**31 - 1; on SQLite INTEGER is 64-bit already, and must stay
# INTEGER for the primary key to be the rowid.
ID = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class lower_bytewise(GenericFunction):  # noqa: N801 (named as SQL functions are)
    """``lower(x)``, compared and ordered code point by code point on every database.

    A prefix of a name is then a range (``p <= lower(name) < p || '\x7f'``, name characters being
    ASCII below DEL). SQLite compares that way already; PostgreSQL compares by the database's
    collation, where "en_US" ignores the underscore at first, so there it is ``COLLATE "C"``.
    """

    type = String()
    inherit_cache = True


@compiles(lower_bytewise)
def _lower(element, compiler, **kw) -> str:
    return f"lower({compiler.process(element.clauses, **kw)})"


@compiles(lower_bytewise, "postgresql")
def _lower_in_c_collation(element, compiler, **kw) -> str:
    return f'lower({compiler.process(element.clauses, **kw)}) COLLATE "C"'


class User(db.Model):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(String(32), unique=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str] = mapped_column(String(60))
    created: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        # "Bob" and "bob" would be two people who look like one: names are unique whatever their case.
        Index("uq_users_name_lower", func.lower(name), unique=True),
        # Finding someone by a prefix of their name. On SQLite the index above serves (it is in code
        # point order already); PostgreSQL's is in the database's collation, which a range may not use.
        Index("ix_users_name_lower_c", lower_bytewise(name)).ddl_if(dialect="postgresql"),
    )


class Tweet(db.Model):
    __tablename__ = "tweets"

    # Ids grow with time, so "newest first" is "highest id first" and pages are keyset ranges of ids.
    id: Mapped[int] = mapped_column(ID, primary_key=True)
    author_id: Mapped[int] = mapped_column(ID, ForeignKey("users.id"))
    text: Mapped[str] = mapped_column(String(280))
    posted: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        # A profile, and each followed author of a timeline: one range of this index, newest first.
        Index("ix_tweets_author_id_id", "author_id", "id"),
        # Never reuse the id of a deleted tweet: ids are cache keys and page bounds.
        {"sqlite_autoincrement": True},
    )


class Follow(db.Model):
    __tablename__ = "follows"

    # The pair is the key: following twice is impossible, and "whom does X follow" is a range of it.
    follower_id: Mapped[int] = mapped_column(ID, ForeignKey("users.id"), primary_key=True)
    followed_id: Mapped[int] = mapped_column(ID, ForeignKey("users.id"), primary_key=True)

    __table_args__ = (
        # "Who follows X": the readers whose timelines X's tweets appear in.
        Index("ix_follows_followed_id_follower_id", "followed_id", "follower_id"),
    )


class CacheInvalidation(db.Model):
    """The log of cache keys made stale by writes, replayed by every process (see docs/caching.md)."""

    __tablename__ = "cache_invalidations"
    # Processes replay the log by id: an id must never come back.
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    key: Mapped[str] = mapped_column(String(200))
    created: Mapped[datetime] = mapped_column(default=utcnow)


class ThrottleEvent(db.Model):
    """Events the app keeps by kind and subject: attempts to log in and register, counted before any
    hashing (throttle.py), and live sessions (kind "session", subject "<user id>:<digest of the session
    id>", at: when it started; auth.py). Sessions live here, not in a table of their own, because the
    stages before the database step run at revision 0002, which has this table and no other to hold them."""

    __tablename__ = "throttle_events"
    __table_args__ = (
        # "How many of this kind for this subject since then": one range of this index.
        Index("ix_throttle_events_kind_subject_at", "kind", "subject", "at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)
