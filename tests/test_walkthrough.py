"""CONTRIBUTING.md's "likes" walkthrough, followed.

Every file, name and test it points at exists. Then its steps 1 to 5 are done in a scratch app: a
``likes`` table, a like count at the end of the tweet row and the statements that build rows by
position, a ``like`` write, and the invalidation state machine with that write as a rule. The write
that forgets its author's page keeps every entry fresh; the one that leaves that out is caught.
"""

from __future__ import annotations

import importlib
import re
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import pytest
import test_invalidation
from helpers.invalidation import QUICK, InvalidationWorld
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule, run_state_machine_as_test
from sqlalchemy import Column, ForeignKey, Integer, MetaData, Table, bindparam, func, insert, select

from tweepy import cache, errors, queries, writes
from tweepy.extensions import db

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()
WALKTHROUGH = TEXT.split("## Where a new feature goes", 1)[1].split("\n## ", 1)[0]
# What the walkthrough has you add: named there, found nowhere yet.
NEW = {"Like", "likes", "like", "unlike", "likes_of"}
MODULES = {path.stem for path in (ROOT / "tweepy").glob("*.py")} | {"cache"}


def code_spans() -> list[str]:
    return re.findall(r"`([^`]+)`", WALKTHROUGH.replace("\n", " "))


def test_the_walkthrough_has_every_step_from_the_model_to_the_tests():
    steps = re.findall(r"^\d+\. \*\*(.+?)\*\*", WALKTHROUGH, re.MULTILINE)
    assert steps == [
        "The model",
        "A migration",
        "The reads",
        "The writes",
        "The invalidation check",
        "The route",
        "The template",
        "The tests",
    ]


def test_every_file_the_walkthrough_names_exists():
    paths = [span for span in code_spans() if re.fullmatch(r"[\w.-]+/[\w./-]*", span)]
    assert len(paths) >= 10, paths
    for path in paths:
        assert (ROOT / path).exists(), f"CONTRIBUTING.md names {path}, which is missing"


def test_every_name_the_walkthrough_points_at_exists_but_the_ones_it_adds():
    pointers = set()
    for span in code_spans():
        for first, rest in re.findall(r"(?<![\w/.])([a-z_]+)\.([A-Za-z_][\w.]*\w)", span):
            if first in MODULES and not NEW & {first, *rest.split(".")}:
                pointers.add(f"{first}.{rest}")
    assert {"queries.TweetRow", "queries._tweets_page", "writes.transaction", "site.STATUS_OF_REFUSAL"} <= pointers
    for pointer in sorted(pointers):
        found = importlib.import_module(f"tweepy.{pointer.split('.')[0]}")
        for attribute in pointer.split(".")[1:]:
            assert hasattr(found, attribute), f"CONTRIBUTING.md points at {pointer}, which does not exist"
            found = getattr(found, attribute)


def test_every_test_and_helper_the_walkthrough_names_exists():
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("*.py"))
    for span in code_spans():
        if re.fullmatch(r"test_\w+", span) and "like" not in span:
            assert f"def {span}(" in tests, f"CONTRIBUTING.md names {span}, which no test defines"
    assert "def possible_args(" in tests and "class InvalidationWorld(" in tests
    assert "macro tweet_item(" in (ROOT / "tweepy/templates/_macros.html").read_text()
    assert "def rendered_tweet(" in (ROOT / "tweepy/fragments.py").read_text()


# --- steps 1 to 5, in a scratch app ------------------------------------------------------------------

# 1. The model, as its migration makes it.
LIKES = Table(
    "likes",
    MetaData(),
    Column("user_id", Integer, ForeignKey(queries.USERS.c.id), primary_key=True),
    Column("tweet_id", Integer, ForeignKey(queries.TWEETS.c.id, ondelete="CASCADE"), primary_key=True, index=True),
)


# 3. The reads: the count at the end of the row, and every place that builds rows by position.
class LikedTweetRow(NamedTuple):
    id: int
    author_id: int
    author_name: str
    text: str
    posted: datetime
    likes: int


def liked_tweets_page(authors) -> tuple:
    """``queries._tweets_page`` with the count as the row's last column."""
    tweets, users = queries.TWEETS, queries.USERS
    likes = select(func.count()).where(LIKES.c.tweet_id == tweets.c.id).scalar_subquery()
    newest = (
        select(tweets.c.id, tweets.c.author_id, users.c.name, tweets.c.text, tweets.c.posted, likes)
        .join(users, users.c.id == tweets.c.author_id)
        .where(authors)
        .order_by(tweets.c.id.desc())
        .limit(bindparam("size"))
    )
    return newest, newest.where(tweets.c.id < bindparam("before"))


def newest_tweets_with(page, tweet_id: int, text: str, posted: datetime):
    """``queries.newest_tweets_with``, building the new tweet's row with its 0 likes."""
    if not page or page[0].id >= tweet_id:
        return None
    newest = page[0]
    row = LikedTweetRow(tweet_id, newest.author_id, newest.author_name, text, posted, 0)
    return (row, *page)[: queries.page_size()]


@pytest.fixture
def rows_with_likes(monkeypatch):
    monkeypatch.setattr(queries, "TweetRow", LikedTweetRow)
    by_author = liked_tweets_page(queries.TWEETS.c.author_id == bindparam("user_id"))
    monkeypatch.setattr(queries, "BY_AUTHOR_NEWEST", by_author[0])
    monkeypatch.setattr(queries, "BY_AUTHOR_OLDER", by_author[1])
    following = queries.FOLLOWED_BY.union_all(select(bindparam("user_id", type_=queries.FOLLOWS.c.followed_id.type)))
    timeline = liked_tweets_page(queries.TWEETS.c.author_id.in_(following))
    monkeypatch.setattr(queries, "TIMELINE_NEWEST", timeline[0])
    monkeypatch.setattr(queries, "TIMELINE_OLDER", timeline[1])
    monkeypatch.setattr(queries, "newest_tweets_with", newest_tweets_with)


# 4. The write.
def like(user_id: int, tweet_id: int, forget_the_authors_page: bool = True) -> None:
    with writes.transaction():
        author_id = db.session.scalar(select(queries.TWEETS.c.author_id).where(queries.TWEETS.c.id == tweet_id))
        if author_id is None:
            raise errors.NotFound("No such tweet.")
        liked = select(LIKES.c.user_id).where(LIKES.c.user_id == user_id, LIKES.c.tweet_id == tweet_id)
        if db.session.scalar(liked) is None:
            db.session.execute(insert(LIKES).values(user_id=user_id, tweet_id=tweet_id))
            if forget_the_authors_page:
                cache.forget(queries.newest_tweets_by.key(author_id))


# 5. The write as a rule of the state machine.
def world_where_a_like(forgets_the_authors_page: bool) -> type[InvalidationWorld]:
    class WorldWithLikes(InvalidationWorld):
        def __init__(self) -> None:
            super().__init__()
            LIKES.create(db.engine)

        @initialize()
        def someone_has_tweeted(self) -> None:
            """From the first step on, there is a tweet to like, so most runs like one."""
            self.register("ann")
            author = self.user_ids()[0]
            writes.post_tweet(author, "the first tweet")
            self.counted[author]["tweets"] += 1
            self.finish()

        @precondition(lambda self: self.tweets())
        @rule(data=st.data())
        def like(self, data) -> None:
            tweet_id, _author = data.draw(st.sampled_from(self.tweets()))
            like(data.draw(st.sampled_from(self.user_ids())), tweet_id, forgets_the_authors_page)
            self.finish()

    return WorldWithLikes


def test_a_like_that_forgets_its_authors_page_leaves_no_stale_entry(rows_with_likes):
    run_state_machine_as_test(world_where_a_like(forgets_the_authors_page=True), settings=QUICK)


def test_a_like_that_leaves_its_authors_page_kept_is_caught(rows_with_likes):
    world = world_where_a_like(forgets_the_authors_page=False)
    with pytest.raises(AssertionError, match=r"newest_tweets_by:\d+ is stale"):
        run_state_machine_as_test(world, settings=settings(QUICK, phases=[Phase.generate]))


def test_a_new_write_fails_the_coverage_check_until_it_is_a_rule(monkeypatch):
    like.__module__ = writes.__name__
    try:
        monkeypatch.setattr(writes, "like", like, raising=False)
        with pytest.raises(AssertionError):
            test_invalidation.test_every_write_is_exercised()
        monkeypatch.setattr(InvalidationWorld, "like", world_where_a_like(True).like, raising=False)
        test_invalidation.test_every_write_is_exercised()
    finally:
        like.__module__ = __name__


def test_a_new_cached_read_fails_the_coverage_check_until_it_is_given_its_arguments():
    cache.memoized("likes_of")(lambda tweet_id: 0)
    try:
        with pytest.raises(AssertionError):
            test_invalidation.test_every_cached_read_is_checked()
    finally:
        del cache.READS["likes_of"]
    test_invalidation.test_every_cached_read_is_checked()
