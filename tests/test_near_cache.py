"""CACHE=redis with CACHE_NEAR: entries in each process in front of Redis, across two nodes on PostgreSQL.

Two app objects on one PostgreSQL database, sharing one Redis, stand in for two nodes. What the near
cache promises (docs/caching.md, stages/7-scale-out/README.md): the writer sees their write at once on
every node; everyone else within CACHE_SYNC_INTERVAL; a delete Redis missed, or a Redis restarted,
leaves nothing stale once the log is replayed; a read found in the process asks Redis nothing, and a
timeline that misses asks it once. What every backend promises is in test_cache_backends.py.
"""

from __future__ import annotations

import time

import pytest
import redis
from flask_migrate import upgrade
from helpers.browser import sign_up
from helpers.caches import drop_prefix, new_prefix, stored
from helpers.invalidation import FORGETS_NOTHING, QUICK, InvalidationWorld
from helpers.pages import tweet_texts
from helpers.postgres import fresh_database
from helpers.services import redis_url
from helpers.stored import user_id
from helpers.worlds import OnePersonsBrowser, warm
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy import text

from tweepy import queries, writes
from tweepy.cache import NearCache
from tweepy.extensions import db

A, B = 0, 1
# As stage 7 runs: a tweet, follow or unfollow is one statement with its log entries.
ONE_STATEMENT_WRITES = {"DB_READS_AUTOCOMMIT": True, "DB_ONE_STATEMENT_WRITES": True}
NEAR = {
    "CACHE": "redis",
    "CACHE_NEAR": True,
    "TIMELINE_FROM_CACHED_PAGES": True,
    "FRAGMENT_CACHE": True,
    **ONE_STATEMENT_WRITES,
}
# Long enough that only the writer's session, never the periodic sync, can explain a fresh page.
NEVER = 600.0
BOUND_S = 1.0


@pytest.fixture(scope="module")
def database():
    with fresh_database("near") as url:
        yield url


@pytest.fixture
def two_nodes(make_app, database):
    """Two apps on one PostgreSQL database (emptied first) and one Redis prefix of their own."""
    url, prefix, apps = redis_url(), new_prefix(), []

    def start(**settings):
        overrides = {**NEAR, "DATABASE_URL": database, "CACHE_URL": url, "CACHE_KEY_PREFIX": prefix}
        apps.extend(make_app(**{**overrides, "CACHE_SYNC_INTERVAL": NEVER, **settings}) for _ in (A, B))
        with apps[A].app_context():
            empty_every_table()
        return apps

    yield start
    for app in apps:
        with app.app_context():
            db.engine.dispose()
    drop_prefix(url, prefix)


def empty_every_table() -> None:
    db.session.execute(
        text("TRUNCATE users, tweets, follows, cache_invalidations, throttle_events RESTART IDENTITY CASCADE")
    )
    db.session.commit()


def near(app) -> NearCache:
    backend = app.extensions["tweepy_cache"]
    assert isinstance(backend, NearCache)
    return backend


def round_trips(app, monkeypatch) -> list[str]:
    """Every round trip the app's process makes to Redis from now on (a pipeline counts once)."""
    client, made = near(app).far.client, []
    execute, pipeline = client.execute_command, client.pipeline
    monkeypatch.setattr(client, "execute_command", lambda *args, **kw: made.append(args[0]) or execute(*args, **kw))
    monkeypatch.setattr(client, "pipeline", lambda **kw: made.append("pipeline") or pipeline(**kw))
    return made


# --- read-your-writes, and the staleness bound for everyone else ----------------------


def test_the_writer_sees_their_tweet_at_once_on_the_other_node_whose_merged_timeline_was_kept(two_nodes):
    apps = two_nodes()
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    sign_up(apps[A], "bob").post("/tweets/", {"tweet": "bob's news"})
    alice.on(A).post("/users/bob/follow")
    assert tweet_texts(warm(alice.on(B), "/tweets/")) == ["bob's news"]
    assert near(apps[B]).results, "B keeps the merged timeline and its page"

    assert alice.on(A).post("/tweets/", {"tweet": "alice's own"}).status_code == 303
    assert tweet_texts(alice.on(B).get("/tweets/")) == ["alice's own", "bob's news"]
    assert tweet_texts(alice.on(B).get("/users/alice/")) == ["alice's own"]


def test_a_follower_on_the_other_node_sees_a_tweet_within_the_bound_and_not_before(two_nodes):
    apps = two_nodes(CACHE_SYNC_INTERVAL=BOUND_S)
    alice, bob = sign_up(apps[A], "alice"), sign_up(apps[B], "bob")
    bob.post("/users/alice/follow")
    time.sleep(BOUND_S)
    assert tweet_texts(warm(bob, "/tweets/")) == []

    alice.post("/tweets/", {"tweet": "hello followers"})
    written_at = time.monotonic()
    assert tweet_texts(bob.get("/tweets/")) == [], "the bound is real: B serves its kept page until it syncs"
    time.sleep(max(0.0, written_at + BOUND_S - time.monotonic()))
    assert tweet_texts(bob.get("/tweets/")) == ["hello followers"]
    assert tweet_texts(bob.get("/users/alice/")) == ["hello followers"]


# --- who is logged in ---------------------------------------------------------------------


def logged_in_on_both_nodes(apps) -> tuple[OnePersonsBrowser, str]:
    """alice registers on A and reads her timeline on B: her session cookie, as a thief could copy it."""
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    assert warm(alice.on(B), "/tweets/").status_code == 200
    return alice, alice.on(B).client.get_cookie("session").value


def with_cookie(app, cookie: str):
    client = app.test_client()
    client.set_cookie("session", cookie)
    return client


def test_a_log_out_ends_every_copy_of_the_cookie_at_once_on_the_other_node(two_nodes):
    apps = two_nodes()
    alice, stolen = logged_in_on_both_nodes(apps)
    assert not near(apps[B]).at_once, "sessions are not kept near"
    assert alice.on(A).post("/logout/").status_code == 303
    assert with_cookie(apps[B], stolen).get("/tweets/").status_code == 302


def test_with_sessions_kept_near_a_log_out_still_ends_every_copy_of_the_cookie_at_once(two_nodes):
    apps = two_nodes(CACHE_NEAR_SESSIONS=True)
    alice, stolen = logged_in_on_both_nodes(apps)
    thief = with_cookie(apps[B], stolen)
    assert thief.get("/tweets/").status_code == 200
    assert near(apps[B]).at_once, "B keeps the session near"

    assert alice.on(A).post("/logout/").status_code == 303
    # Redis pushed the session's name to B before it answered A: no sync, no wait.
    assert thief.get("/tweets/").status_code == 302
    assert not near(apps[B]).at_once


def test_a_session_kept_near_is_read_again_from_redis_while_redis_cannot_push_its_changes(two_nodes):
    apps = two_nodes(CACHE_NEAR_SESSIONS=True)
    alice, stolen = logged_in_on_both_nodes(apps)
    thief = with_cookie(apps[B], stolen)
    assert thief.get("/tweets/").status_code == 200
    pushed = near(apps[B]).pushed
    redis.Redis.from_url(redis_url()).client_kill_filter(_id=pushed.client_id)

    assert alice.on(A).post("/logout/").status_code == 303
    assert thief.get("/tweets/").status_code == 302
    assert thief.get("/tweets/").status_code == 302
    assert pushed.watching, "B follows Redis's changes again, on a connection made anew"


def test_a_session_whose_delete_redis_missed_ends_on_the_other_node_once_the_log_is_replayed(two_nodes, monkeypatch):
    apps = two_nodes(CACHE_NEAR_SESSIONS=True, CACHE_SYNC_INTERVAL=BOUND_S)
    alice, stolen = logged_in_on_both_nodes(apps)
    thief = with_cookie(apps[B], stolen)
    assert thief.get("/tweets/").status_code == 200
    monkeypatch.setattr(near(apps[A]).far, "replace", lambda values, stamp: None)  # nothing changes in Redis: no push

    assert alice.on(A).post("/logout/").status_code == 303
    logged_out_at = time.monotonic()
    assert thief.get("/tweets/").status_code == 200, "only the log can tell B, within the bound"
    time.sleep(max(0.0, logged_out_at + BOUND_S - time.monotonic()))
    assert thief.get("/tweets/").status_code == 302


# --- what a read costs in round trips to Redis ------------------------------------------


@pytest.mark.parametrize(("sessions_near", "asked"), [(False, ["pipeline"]), (True, [])])
def test_a_timeline_found_in_the_process_asks_redis_at_most_who_is_logged_in(
    two_nodes, monkeypatch, sessions_near, asked
):
    apps = two_nodes(CACHE_NEAR_SESSIONS=sessions_near)
    alice = sign_up(apps[A], "alice")
    for name in ("bob", "carol", "dave"):
        sign_up(apps[A], name).post("/tweets/", {"tweet": f"{name}'s news"})
        alice.post(f"/users/{name}/follow")
    warm(alice, "/tweets/")
    made = round_trips(apps[A], monkeypatch)

    assert tweet_texts(alice.get("/tweets/")) == ["dave's news", "carol's news", "bob's news"]
    # The session is read from Redis unless Redis pushes its changes to the process, which keeps it near.
    assert made == asked


def test_a_timeline_whose_pages_all_changed_asks_redis_for_them_in_one_round_trip(two_nodes, monkeypatch):
    apps = two_nodes(CACHE_SYNC_INTERVAL=BOUND_S)
    alice = OnePersonsBrowser(*apps)
    alice.on(B).register("alice")
    authors = {name: sign_up(apps[A], name) for name in ("bob", "carol", "dave")}
    for name in authors:
        alice.on(B).post(f"/users/{name}/follow")
    time.sleep(BOUND_S)
    warm(alice.on(B), "/tweets/")
    for name, author in authors.items():
        author.post("/tweets/", {"tweet": f"{name}'s news"})
    time.sleep(BOUND_S)
    news = ["dave's news", "carol's news", "bob's news"]
    assert tweet_texts(alice.on(A).get("/tweets/")) == news  # A reads the new pages into Redis
    made = round_trips(apps[B], monkeypatch)

    assert tweet_texts(alice.on(B).get("/tweets/")) == news
    # Who is logged in; then the three changed pages at once (Redis has them: nothing to store).
    assert made == ["pipeline", "pipeline"]
    assert all(queries.newest_tweets_by.key(user_id(apps[A], name)) in near(apps[B]).entries for name in authors)


# --- what a write gives Redis ---------------------------------------------------------------


def test_a_page_the_writer_changed_in_place_is_given_to_redis_for_the_other_node(two_nodes, monkeypatch):
    apps = two_nodes()
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    alice.on(A).post("/tweets/", {"tweet": "hello"})
    warm(alice.on(A), "/users/alice/")  # A keeps her page, current
    page = queries.newest_tweets_by.key(user_id(apps[A], "alice"))

    assert alice.on(A).post("/tweets/", {"tweet": "made in place"}).status_code == 303
    assert [row.text for row in stored(apps[B], page)] == ["made in place", "hello"]
    monkeypatch.setattr(queries.newest_tweets_by, "uncached", lambda *args: pytest.fail("read from the database"))
    assert tweet_texts(alice.on(B).get("/users/alice/")) == ["made in place", "hello"]


def test_a_page_given_to_redis_after_a_later_write_is_never_served(two_nodes):
    apps = two_nodes(CACHE_SYNC_INTERVAL=BOUND_S)
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    alice.on(A).post("/tweets/", {"tweet": "hello"})
    warm(alice.on(A), "/users/alice/")
    page = queries.newest_tweets_by.key(user_id(apps[A], "alice"))
    far = near(apps[A]).far
    assert alice.on(A).post("/tweets/", {"tweet": "first"}).status_code == 303
    late = far.client.hgetall(far.prefix + page)  # the first write's page, as if it reached Redis late
    assert [row.text for row in stored(apps[B], page)] == ["first", "hello"]

    assert alice.on(B).post("/tweets/", {"tweet": "second"}).status_code == 303
    far.client.hset(far.prefix + page, mapping=late)

    # The second writer, on either node, and everyone once the bound has passed, read it afresh.
    everything = ["second", "first", "hello"]
    assert tweet_texts(alice.on(A).get("/users/alice/")) == everything
    assert tweet_texts(alice.on(B).get("/users/alice/")) == everything
    time.sleep(BOUND_S)
    assert tweet_texts(apps[A].test_client().get("/users/alice/")) == everything


# --- a delete Redis missed, and a Redis restarted -------------------------------------------


def test_a_delete_redis_missed_leaves_no_stale_page_once_the_log_is_replayed(two_nodes, monkeypatch):
    apps = two_nodes(CACHE_SYNC_INTERVAL=BOUND_S)
    alice, bob = OnePersonsBrowser(*apps), sign_up(apps[B], "bob")
    alice.on(A).register("alice")
    bob.post("/users/alice/follow")
    time.sleep(BOUND_S)
    assert tweet_texts(warm(bob, "/tweets/")) == []
    page = queries.newest_tweets_by.key(user_id(apps[A], "alice"))
    assert stored(apps[B], page) == ()

    monkeypatch.setattr(near(apps[A]).far, "replace", lambda values, stamp: None)  # the delete is lost on its way
    assert alice.on(A).post("/tweets/", {"tweet": "the delete was lost"}).status_code == 303
    assert stored(apps[B], page) == (), "Redis still holds the page the write made stale"

    # The writer, on the other node at once: their session says how far the log must be replayed.
    assert tweet_texts(alice.on(B).get("/users/alice/")) == ["the delete was lost"]
    assert [row.text for row in stored(apps[B], page)] == ["the delete was lost"], "the stale entry is replaced"
    time.sleep(BOUND_S)
    assert tweet_texts(bob.get("/tweets/")) == ["the delete was lost"]


def test_a_redis_restart_costs_no_error_and_no_stale_page(make_app, database, own_redis):
    settings = {**NEAR, "DATABASE_URL": database, "CACHE_URL": own_redis.url, "CACHE_TIMEOUT_S": 0.2}
    apps = [make_app(**settings, CACHE_SYNC_INTERVAL=BOUND_S) for _ in (A, B)]
    with apps[A].app_context():
        empty_every_table()
    try:
        alice, bob = sign_up(apps[A], "alice"), sign_up(apps[B], "bob")
        bob.post("/users/alice/follow")
        time.sleep(BOUND_S)
        assert tweet_texts(warm(bob, "/tweets/")) == []

        own_redis.stop()
        assert alice.post("/tweets/", {"tweet": "while Redis was down"}).status_code == 303
        time.sleep(BOUND_S)
        assert tweet_texts(bob.get("/tweets/")) == ["while Redis was down"]

        own_redis.start()
        time.sleep(BOUND_S * 1.5)
        assert alice.post("/tweets/", {"tweet": "after Redis came back"}).status_code == 303
        time.sleep(BOUND_S)
        assert tweet_texts(warm(bob, "/tweets/")) == ["after Redis came back", "while Redis was down"]
        assert stored(apps[B], queries.newest_tweets_by.key(user_id(apps[A], "alice"))), "Redis is used again"
    finally:
        for app in apps:
            with app.app_context():
                db.engine.dispose()


def test_a_redis_restart_ends_no_session_late_and_sessions_are_kept_near_again_after(make_app, database, own_redis):
    interval = 3.0  # the log's replay cannot explain a log out seen sooner
    settings = {**NEAR, "DATABASE_URL": database, "CACHE_URL": own_redis.url, "CACHE_TIMEOUT_S": 0.2}
    apps = [make_app(**settings, CACHE_NEAR_SESSIONS=True, CACHE_SYNC_INTERVAL=interval) for _ in (A, B)]
    with apps[A].app_context():
        empty_every_table()
    try:
        alice, stolen = logged_in_on_both_nodes(apps)
        thief = with_cookie(apps[B], stolen)
        assert thief.get("/tweets/").status_code == 200
        assert near(apps[B]).at_once

        own_redis.stop()
        assert alice.on(A).post("/logout/").status_code == 303
        assert thief.get("/tweets/").status_code == 302, "B lost Redis's pushes, and with them what it kept"

        own_redis.start()
        time.sleep(interval)
        assert alice.on(A).login("alice").status_code == 303
        assert warm(alice.on(B), "/tweets/").status_code == 200
        assert near(apps[B]).pushed.watching and near(apps[B]).at_once, "kept near again"
    finally:
        for app in apps:
            with app.app_context():
                db.engine.dispose()


# --- the invalidation state machine, across two nodes -----------------------------------


class InvalidationWorldOnTwoNearNodes(InvalidationWorld):
    """The world's writes on node A; nodes A and B checked, B once it has replayed the log."""

    database = ""
    lose_redis_deletes = False

    def __init__(self) -> None:
        self.url, self.prefix = redis_url(), new_prefix()
        super().__init__()
        empty_every_table()
        self.other = self.node()
        if self.lose_redis_deletes:
            near(self.app).far.replace = lambda values, stamp: None

    def settings(self) -> dict:
        # Long enough that only catch_up replays the log, short of the time after which a process drops all.
        near = {"CACHE_URL": self.url, "CACHE_KEY_PREFIX": self.prefix, "CACHE_SYNC_INTERVAL": 60.0}
        return {
            **super().settings(),
            "DATABASE_URL": self.database,
            "CACHE": "redis",
            "CACHE_NEAR": True,
            "CACHE_NEAR_SESSIONS": True,
            **ONE_STATEMENT_WRITES,
            **near,
        }

    def node(self):
        from tweepy import create_app

        app = create_app(self.settings())
        with app.app_context():
            upgrade()
        return app

    def processes(self) -> list:
        return [self.app, self.other]

    def kept(self, app):
        return {**near(app).entries, **near(app).at_once}

    def catch_up(self, app) -> None:
        backend = near(app)
        backend.synced_at = time.monotonic() - backend.sync_interval  # the bound has passed
        backend.sync()

    def teardown(self) -> None:
        super().teardown()
        for app in (self.app, self.other):
            with app.app_context():
                db.engine.dispose()
        drop_prefix(self.url, self.prefix)


@pytest.fixture
def near_world(database):
    InvalidationWorldOnTwoNearNodes.database = database
    return InvalidationWorldOnTwoNearNodes


def test_no_write_leaves_a_stale_entry_on_either_node(near_world):
    run_state_machine_as_test(near_world, settings=QUICK)


def test_no_write_leaves_a_stale_entry_on_either_node_when_redis_misses_every_delete(near_world, monkeypatch):
    monkeypatch.setattr(near_world, "lose_redis_deletes", True)
    run_state_machine_as_test(near_world, settings=QUICK)


@pytest.mark.parametrize("mutant", ["forget", "change"])
def test_a_write_that_forgets_nothing_is_caught_on_the_near_nodes(near_world, monkeypatch, mutant):
    monkeypatch.setattr(writes, mutant, FORGETS_NOTHING[mutant])
    with pytest.raises(AssertionError, match="stale"):
        run_state_machine_as_test(near_world, settings=settings(QUICK, phases=[Phase.generate]))
