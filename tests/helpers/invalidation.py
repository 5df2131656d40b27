"""A random world of writes with the cache on, checking after each that no kept entry is stale.

Used by tests/test_invalidation.py for every cache backend: between writes, every cached
read is asked for every argument it can take, and whatever the cache holds must equal
what the database says now. The world also keeps its own tally of what each write should
change on the profiles (tweets, followers, following), and every profile must show it.
"""

from __future__ import annotations

import secrets
import tempfile
from collections import Counter
from datetime import timedelta
from pathlib import Path

from flask_migrate import upgrade
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import select

from tweepy import cache, create_app, errors, queries, writes
from tweepy.extensions import db
from tweepy.models import Tweet, User

from .stored import FAST_BCRYPT, PASSWORD_HASH


def change_that_forgets_nothing(statement, params, forgets=(), patch=None):
    row = db.session.execute(statement, params).first()
    return None if row is None else tuple(row)


# Writes that forget nothing, each way writes.py forgets: the world must catch every one.
FORGETS_NOTHING = {"forget": lambda *keys: None, "change": change_that_forgets_nothing}

NAMES = ["ann", "bob", "cy", "dee", "Eve"]  # "cy" is too short: registering it is refused before any write
PAGE_SIZE = 2  # small pages, so every registration changes one


def possible_args(user_ids: list[int]) -> dict[str, list[tuple]]:
    """Every argument each cached read can be asked for, ids, names and sessions that do not exist included."""
    ids = [*user_ids, max(user_ids, default=0) + 1]
    sessions = [(i, digest) for i in user_ids for digest, _started in queries.sessions_of(i)]
    names = [*NAMES, *(n.upper() for n in NAMES), "nobody", "K\u212aelvin"]
    pages = range(1, len(ids) // PAGE_SIZE + 3)
    return {
        "session": [*sessions, *((i, "0" * 40) for i in ids)],
        "user_named": [(n,) for n in names],
        "following": [(i,) for i in ids],
        "newest_tweets_by": [(i,) for i in ids],
        "users_page": [(p,) for p in pages],
    }


class InvalidationWorld(RuleBasedStateMachine):
    """The writes all come from one process, ``self.app``; ``processes`` are the ones whose caches are checked."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="tweepy-invalidation-"))
        self.app = create_app(self.settings())
        self.context = self.app.app_context()
        self.context.push()
        upgrade()
        # What the profiles should count, by user id, as the writes below say; and who follows whom.
        self.counted: dict[int, Counter] = {}
        self.following: set[tuple[int, int]] = set()

    def settings(self) -> dict:
        return {
            "DATABASE_URL": f"sqlite:///{self.folder / 'tweepy.sqlite3'}",
            "INSTANCE_PATH": str(self.folder / "instance"),
            "SECRET_KEY": "test-secret",
            "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
            "TESTING": True,
            "CACHE": "local",
            "CACHE_SYNC_INTERVAL": 3600.0,
            "PAGE_SIZE": PAGE_SIZE,
        }

    def processes(self) -> list:
        """The apps (processes) whose caches the invariant checks."""
        return [self.app]

    def kept(self, app):
        """What a process's cache holds, by key."""
        return app.extensions["tweepy_cache"].entries

    def catch_up(self, app) -> None:
        """What happens in a process before it serves a request once the staleness bound has passed."""

    def teardown(self) -> None:
        db.session.remove()
        self.context.pop()

    def user_ids(self) -> list[int]:
        return list(db.session.scalars(select(User.id).order_by(User.id)))

    def sessions(self) -> list[tuple[int, str]]:
        return [(i, digest) for i in self.user_ids() for digest, _started in queries.sessions_of(i)]

    def tweets(self) -> list[tuple[int, int]]:
        return list(db.session.execute(select(Tweet.id, Tweet.author_id).order_by(Tweet.id)))

    def finish(self) -> None:
        db.session.close()  # as at the end of a request

    # --- the writes ---------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def register(self, name: str) -> None:
        if queries.is_possible_name(name):
            try:
                account = writes.register(name, f"{name}@example.com", PASSWORD_HASH)
            except errors.Taken:
                pass
            else:
                self.counted[account.id] = Counter()
        self.finish()

    @precondition(lambda self: self.user_ids())
    @rule(data=st.data())
    def post_tweet(self, data) -> None:
        author = data.draw(st.sampled_from(self.user_ids()))
        writes.post_tweet(author, f"tweet {len(self.tweets())}")
        self.counted[author]["tweets"] += 1
        self.finish()

    @precondition(lambda self: self.tweets())
    @rule(data=st.data())
    def delete_tweet(self, data) -> None:
        tweet_id, author = data.draw(st.sampled_from(self.tweets()))
        writes.delete_tweet(author, tweet_id)
        self.counted[author]["tweets"] -= 1
        self.finish()

    @precondition(lambda self: len(self.user_ids()) >= 2)
    @rule(data=st.data())
    def follow(self, data) -> None:
        follower, followed = data.draw(st.permutations(self.user_ids()))[:2]
        writes.follow(follower, followed)
        if (follower, followed) not in self.following:
            self.following.add((follower, followed))
            self.counted[follower]["following"] += 1
            self.counted[followed]["followers"] += 1
        self.finish()

    @precondition(lambda self: self.user_ids())
    @rule(data=st.data(), expired=st.booleans())
    def start_session(self, data, expired: bool) -> None:
        user_id = data.draw(st.sampled_from(self.user_ids()))
        # A lifetime of nothing: every session the user had expired, and goes.
        lifetime = timedelta(0) if expired else timedelta(days=14)
        writes.start_session(user_id, secrets.token_hex(20), lifetime)
        self.finish()

    @precondition(lambda self: self.sessions())
    @rule(data=st.data())
    def end_session(self, data) -> None:
        writes.end_session(*data.draw(st.sampled_from(self.sessions())))
        self.finish()

    @precondition(lambda self: self.user_ids())
    @rule(data=st.data())
    def end_all_sessions(self, data) -> None:
        writes.end_all_sessions(data.draw(st.sampled_from(self.user_ids())))
        self.finish()

    @rule(name=st.sampled_from([*NAMES, "not a name"]))
    def note_attempts(self, name: str) -> None:
        self.noted = writes.note_attempts([("login-account", name.lower()), ("login-address", "192.0.2.1")])
        self.finish()

    @precondition(lambda self: getattr(self, "noted", None))
    @rule(name=st.sampled_from(NAMES))
    def withdraw_attempts(self, name: str) -> None:
        writes.withdraw_attempts(self.noted, ("login-here", name.lower()))
        self.noted = None
        self.finish()

    @precondition(lambda self: len(self.user_ids()) >= 2)
    @rule(data=st.data())
    def unfollow(self, data) -> None:
        follower, followed = data.draw(st.permutations(self.user_ids()))[:2]
        writes.unfollow(follower, followed)
        if (follower, followed) in self.following:
            self.following.discard((follower, followed))
            self.counted[follower]["following"] -= 1
            self.counted[followed]["followers"] -= 1
        self.finish()

    # --- the check ----------------------------------------------------------------

    @invariant()
    def every_kept_entry_is_what_the_database_says_then_everything_is_read_again(self) -> None:
        arguments_of = possible_args(self.user_ids())
        for app in self.processes():
            with app.app_context():
                self.catch_up(app)
                kept = self.kept(app)
                for name, arguments in arguments_of.items():
                    read = cache.READS[name]
                    for args in arguments:
                        key = read.key(*args)
                        fresh = read.uncached(*read.canonical(*args))
                        if key in kept:
                            assert kept[key] == fresh, f"{key} is stale: a write changed it without forgetting it"
                        # Kept for the next write to make stale; what is served must be fresh too.
                        assert read(*args) == fresh, f"{key} is served stale"
                db.session.remove()
        self.finish()

    @invariant()
    def every_profile_counts_exactly_what_the_writes_changed(self) -> None:
        assert set(self.counted) == set(self.user_ids()), "a write added or removed someone unseen"
        for user, counted in self.counted.items():
            profile = queries.profile_of(user, None)
            shown = {"tweets": profile.tweets, "followers": profile.followers, "following": profile.following}
            assert shown == {"tweets": 0, "followers": 0, "following": 0, **counted}, f"user {user}'s counts"
        self.finish()


# What hypothesis may try: enough for every write to hit every read, small enough to stay quick.
QUICK = settings(
    max_examples=30,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
