"""CACHE=redis: one cache in Redis shared by every node, evicted after each write commits.

Two app objects on one database stand in for two nodes (a SQLite file, or PostgreSQL where commits
can come out of id order), each test under a Redis key prefix of its own. What every backend
promises (read-your-writes, a cached page is the uncached page) is tested in test_cache_backends.py;
here, what Redis alone adds (docs/caching.md): commits out of order leave nothing stale, a miss
leaves nothing lasting, and a Redis that goes away costs no error, and no stale page once it is back
longer than CACHE_SYNC_INTERVAL.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime

import pytest
from flask_migrate import upgrade
from helpers.browser import sign_up
from helpers.caches import cached_keys, drop_prefix, free_port, new_prefix, same_types, stored
from helpers.invalidation import FORGETS_NOTHING, QUICK, InvalidationWorld
from helpers.pages import tweet_texts
from helpers.postgres import fresh_database
from helpers.services import redis_url
from helpers.stored import FAST_BCRYPT, user_id
from helpers.worlds import warm
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy import func, insert, select

from tweepy import config, create_app, queries, writes
from tweepy.cache import CLAIM_TTL_MS, RedisCache, cache, codec, forget
from tweepy.extensions import db
from tweepy.models import CacheInvalidation, Tweet
from tweepy.writes import transaction

A, B = 0, 1
# Long enough that only eviction on write, never the periodic check, can explain a fresh page.
NEVER = 600.0
CACHED = {"CACHE": "redis", "TIMELINE_FROM_CACHED_PAGES": True, "FRAGMENT_CACHE": True}


@pytest.fixture
def prefix():
    url, name = redis_url(), new_prefix()
    yield name
    drop_prefix(url, name)


@pytest.fixture
def two_nodes(make_app, prefix):
    def start(**settings):
        overrides = {**CACHED, "CACHE_URL": redis_url(), "CACHE_KEY_PREFIX": prefix, "CACHE_SYNC_INTERVAL": NEVER}
        return [make_app(**{**overrides, **settings}) for _ in (A, B)]

    return start


# --- settings -------------------------------------------------------------------


def test_the_logged_settings_show_no_redis_password():
    effective = {s.name: s.default for s in config.SETTINGS}
    effective.update(DATABASE_URL="sqlite:///x.sqlite3", CACHE_URL="redis://:hunter2@cache.example:6379/3")
    shown = config.shown(effective)
    assert "hunter2" not in str(shown) and "cache.example:6379/3" in shown["CACHE_URL"]


# --- read-your-writes, and everyone else at once ---------------------------------


def test_a_miss_leaves_only_the_generation_a_store_would_need_and_only_for_seconds(two_nodes):
    apps = two_nodes()
    bob = sign_up(apps[B], "bob")
    assert warm(bob, "/users/carol/").status_code == 404  # nobody is called carol
    missed = queries.user_named.key("carol")
    assert missed not in cached_keys(apps[B]), "a miss is not kept"
    backend = apps[B].extensions["tweepy_cache"]
    assert 0 < backend.client.pttl(backend.prefix + missed) <= CLAIM_TTL_MS


def round_trips(monkeypatch) -> list:
    """Every time a Redis client of this process sends (one command, or a whole pipeline), from now on."""
    from redis.connection import AbstractConnection

    sent = []
    send = AbstractConnection.send_packed_command
    monkeypatch.setattr(AbstractConnection, "send_packed_command", lambda *a, **kw: sent.append(a) or send(*a, **kw))
    return sent


def test_a_timeline_asks_redis_for_all_its_authors_pages_in_one_round_trip(two_nodes, monkeypatch):
    apps = two_nodes()
    alice = sign_up(apps[A], "alice")
    for name in ("bob", "carol", "dave"):
        sign_up(apps[A], name).post("/tweets/", {"tweet": f"{name}'s news"})
        alice.post(f"/users/{name}/follow")
    warm(alice, "/tweets/")
    sent = round_trips(monkeypatch)

    page = alice.get("/tweets/")
    assert tweet_texts(page) == ["dave's news", "carol's news", "bob's news"]
    # Who is logged in, whom they follow, then the four authors' pages at once (nothing to store).
    assert len(sent) == 3


def test_a_redis_that_lost_its_scripts_is_given_them_again_and_serves_the_page(two_nodes, monkeypatch):
    apps = two_nodes()
    alice = sign_up(apps[A], "alice")
    sign_up(apps[A], "bob").post("/tweets/", {"tweet": "bob's news"})
    alice.post("/users/bob/follow")
    warm(alice, "/tweets/")
    backend = apps[A].extensions["tweepy_cache"]
    backend.client.script_flush()  # as a restarted Redis, or a failover to a replica, has none
    sent = round_trips(monkeypatch)

    page = alice.get("/tweets/")
    assert page.status_code == 200 and tweet_texts(page) == ["bob's news"]
    # The first read refused, its script loaded, the read again; then the two other reads as before.
    assert len(sent) == 3 + 2
    assert backend.client.script_exists(backend.value_or_generation.sha) == [True]


# --- a cached page is the page ----------------------------------------------------


# --- what Redis holds ---------------------------------------------------------------


def test_values_come_back_from_redis_as_the_types_the_reads_return(two_nodes):
    apps = two_nodes()
    alice, bob = sign_up(apps[A], "alice"), sign_up(apps[B], "bob")
    alice.post("/users/bob/follow")
    bob.post("/tweets/", {"tweet": "bob's news, \u00e9t\u00e9 \u2603"})
    warm(alice, "/tweets/")
    warm(alice, "/users/")
    warm(alice, "/users/bob/")
    alice_id, bob_id = user_id(apps[A], "alice"), user_id(apps[A], "bob")
    with apps[A].app_context():
        ((alices_session, _),) = queries.sessions_of(alice_id)
    reads = [
        (queries.session_of, (alice_id, alices_session)),
        (queries.user_named, ("bob",)),
        (queries.following_of, (alice_id,)),
        (queries.newest_tweets_by, (bob_id,)),
        (queries.users_page, (1,)),
    ]
    with apps[B].app_context():
        for read, args in reads:
            kept, fresh = stored(apps[B], read.key(*args)), read.uncached(*args)
            assert kept == fresh and same_types(kept, fresh), read.name
    assert isinstance(stored(apps[B], queries.newest_tweets_by.key(bob_id))[0].posted, datetime)


def test_every_row_type_a_read_returns_can_be_kept_in_redis():
    rows = {kind for kind in vars(queries).values() if isinstance(kind, type) and hasattr(kind, "_fields")}
    registered = {row.cls for row in codec.ROWS.values()}
    assert rows and rows <= registered, f"register {rows - registered} with tweepy.cache.row_type"


class RunsCodeWhenUnpickled:
    """A payload that makes a folder the moment ``pickle.loads`` reads it."""

    def __init__(self, folder) -> None:
        self.folder = str(folder)

    def __reduce__(self):
        return (os.mkdir, (self.folder,))


def test_a_pickle_planted_in_redis_is_refused_not_run(two_nodes, tmp_path):
    apps = two_nodes()
    alice = sign_up(apps[A], "alice")
    assert alice.post("/tweets/", {"tweet": "mine"}).status_code == 303
    name = apps[B].extensions["tweepy_cache"].prefix + queries.newest_tweets_by.key(user_id(apps[A], "alice"))
    ran = tmp_path / "the payload ran"
    planted = pickle.dumps(RunsCodeWhenUnpickled(ran))
    client = apps[B].extensions["tweepy_cache"].client
    client.hset(name, mapping={"value": planted, "generation": "planted"})

    assert tweet_texts(sign_up(apps[B], "bob").get("/users/alice/")) == ["mine"]
    assert not ran.exists(), "reading the cache ran code someone wrote into Redis"
    assert client.hget(name, "value") != planted, "the planted entry is dropped"
    pickle.loads(planted)  # what reading it with pickle would have done
    assert ran.exists()


# --- the invalidation state machine, on Redis --------------------------------------


class RedisEntries:
    """What the state machine's invariant reads as ``entries``: the values kept in Redis."""

    def __init__(self, backend: RedisCache) -> None:
        self.backend = backend

    def __contains__(self, key: str) -> bool:
        return self.backend.client.hexists(self.backend.prefix + key, "value")

    def __getitem__(self, key: str):
        return codec.decode(self.backend.client.hget(self.backend.prefix + key, "value"))


class InvalidationWorldOnRedis(InvalidationWorld):
    def __init__(self) -> None:
        self.url, self.prefix = redis_url(), new_prefix()
        super().__init__()
        # The same world, its cache replaced (it makes no requests, so no hook of the local cache runs).
        backend = RedisCache(self.url, self.prefix, ttl=300, timeout=1.0, sync_interval=3600.0)
        backend.entries = RedisEntries(backend)
        self.app.extensions["tweepy_cache"] = backend

    def teardown(self) -> None:
        super().teardown()
        drop_prefix(self.url, self.prefix)


def test_no_write_leaves_a_stale_entry_in_redis():
    run_state_machine_as_test(InvalidationWorldOnRedis, settings=QUICK)


@pytest.mark.parametrize("mutant", ["forget", "change"])
def test_a_write_that_forgets_nothing_is_caught_on_redis(monkeypatch, mutant):
    from hypothesis import Phase, settings

    monkeypatch.setattr(writes, mutant, FORGETS_NOTHING[mutant])
    with pytest.raises(AssertionError, match="is stale"):
        run_state_machine_as_test(InvalidationWorldOnRedis, settings=settings(QUICK, phases=[Phase.generate]))


# --- commits out of id order, on PostgreSQL ----------------------------------------


class EvictsBeforeCommit(RedisCache):
    """Naive: evicts as soon as the write forgets, inside its transaction."""

    def forget(self, *keys):
        self.evict(keys)


class StoresWithoutGeneration(RedisCache):
    """Naive: evicts after commit, but a store does not check that no eviction came since the read began."""

    def get_or_compute(self, key, compute, keep):
        name = self.prefix + key
        payload = self.client.hget(name, "value")
        if payload is not None:
            return codec.decode(payload)
        value = compute()
        if keep(value):
            self.client.hset(name, "value", codec.encode(value))
        return value


TIMEOUT_S = 10


class TheDangerousSchedule:
    """Two writers commit out of id order while readers fill the author's page around them.

    1. A inserts a tweet (the lower id) and forgets the page; it does not commit yet.
    2. B inserts a tweet (the higher id), forgets the page, commits and evicts: B's id commits first.
    3. A slow reader misses, reads the page (B's tweet, not A's) and is held before storing.
    4. A commits, and is held between its commit and its eviction.
    5. Another reader fills the page in that gap.
    6. A evicts; then the slow reader stores what it read in step 3.
    """

    STEPS = ("a_forgot", "b_done", "slow_read", "a_committed", "gap_filled", "a_evicted")

    def __init__(self, app, author_id: int) -> None:
        self.app, self.author_id = app, author_id
        self.key = queries.newest_tweets_by.key(author_id)
        self.step = {name: threading.Event() for name in self.STEPS}
        self.failures: list[BaseException] = []
        backend = app.extensions["tweepy_cache"]
        after_commit = backend.after_commit

        def held_after_commit():
            if threading.current_thread().name == "A":
                self.step["a_committed"].set()
                self.step["gap_filled"].wait(TIMEOUT_S)
            after_commit()
            if threading.current_thread().name == "A":
                self.step["a_evicted"].set()

        backend.after_commit = held_after_commit

    def post(self, text: str) -> None:
        db.session.execute(insert(Tweet).values(author_id=self.author_id, text=text))
        forget(self.key)

    def writer_a(self) -> None:
        with self.app.app_context(), transaction():
            self.post("by A, lower id")
            self.step["a_forgot"].set()
            self.step["slow_read"].wait(TIMEOUT_S)

    def writer_b(self) -> None:
        self.step["a_forgot"].wait(TIMEOUT_S)
        with self.app.app_context(), transaction():
            self.post("by B, higher id")
        self.step["b_done"].set()

    def slow_reader(self) -> None:
        self.step["b_done"].wait(TIMEOUT_S)

        def read_then_wait():
            rows = queries.newest_tweets_by.uncached(self.author_id)
            self.step["slow_read"].set()
            self.step["a_evicted"].wait(TIMEOUT_S)
            return rows

        with self.app.app_context():
            cache().get_or_compute(self.key, read_then_wait, queries.newest_tweets_by.keep)

    def gap_reader(self) -> None:
        self.step["a_committed"].wait(TIMEOUT_S)
        with self.app.app_context():
            queries.newest_tweets_by(self.author_id)
        self.step["gap_filled"].set()

    def guarded(self, target):
        try:
            target()
        except BaseException as error:
            self.failures.append(error)

    def run(self) -> tuple:
        """What Redis keeps for the page at the end, and what the database says."""
        actors = {"A": self.writer_a, "B": self.writer_b, "slow": self.slow_reader, "gap": self.gap_reader}
        threads = [threading.Thread(target=self.guarded, args=(actor,), name=name) for name, actor in actors.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT_S * 2)
        assert not self.failures, self.failures
        assert all(event.is_set() for event in self.step.values()), "the schedule did not run as written"
        with self.app.app_context():
            rows = db.session.execute(
                select(Tweet.id, Tweet.text).where(Tweet.author_id == self.author_id).order_by(Tweet.id)
            ).all()
            assert [text for _, text in rows] == ["by A, lower id", "by B, higher id"], "B's id must be the higher"
            return stored(self.app, self.key), queries.newest_tweets_by.uncached(self.author_id)


@pytest.fixture
def pg_app_with(prefix):
    """An app on a PostgreSQL database of its own, whose cache is the given kind of RedisCache."""
    apps = []
    with fresh_database("redis") as url:

        def build(backend_class=RedisCache):
            app = create_app(
                {
                    "DATABASE_URL": url,
                    "SECRET_KEY": "test-secret",
                    "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
                    "TESTING": True,
                    "CACHE": "redis",
                    "CACHE_URL": redis_url(),
                    "CACHE_KEY_PREFIX": prefix,
                    "CACHE_SYNC_INTERVAL": NEVER,
                }
            )
            with app.app_context():
                upgrade()
            app.extensions["tweepy_cache"] = backend_class(redis_url(), prefix, 300, 1.0, NEVER)
            apps.append(app)
            return app

        yield build
        for app in apps:
            with app.app_context():
                db.engine.dispose()


def an_author(app) -> int:
    sign_up(app, "alice")
    return user_id(app, "alice")


def test_writers_committing_out_of_id_order_leave_no_stale_entry_on_postgresql(pg_app_with):
    app = pg_app_with()
    kept, fresh = TheDangerousSchedule(app, an_author(app)).run()
    assert [row.text for row in fresh] == ["by B, higher id", "by A, lower id"]
    assert kept in (None, fresh)
    with app.app_context():
        assert queries.newest_tweets_by(user_id(app, "alice")) == fresh
        # No writer needs to take turns: nothing was logged, nothing waits on a lock.
        assert db.session.scalar(select(func.count()).select_from(CacheInvalidation)) == 0


@pytest.mark.parametrize("naive", [EvictsBeforeCommit, StoresWithoutGeneration])
def test_the_same_schedule_leaves_a_stale_entry_with_a_naive_design(pg_app_with, naive):
    """What the test above would catch: each half of the design is needed."""
    app = pg_app_with(naive)
    kept, fresh = TheDangerousSchedule(app, an_author(app)).run()
    assert kept is not None and kept != fresh
    assert [row.text for row in kept] == ["by B, higher id"]


# --- Redis going away ----------------------------------------------------------------

OUTAGE_SYNC_S = 0.3


def every_page_answers(browser, pages=("/tweets/", "/users/", "/users/alice/", "/users/bob/")) -> None:
    for page in pages:
        status = browser.get(page).status_code
        assert status == 200, f"{page}: {status}"


@pytest.fixture
def nodes_on_own_redis(make_app, own_redis):
    def start():
        settings = {
            **CACHED,
            "CACHE_URL": own_redis.url,
            "CACHE_SYNC_INTERVAL": OUTAGE_SYNC_S,
            "CACHE_TIMEOUT_S": 0.2,
        }
        return [make_app(**settings) for _ in (A, B)]

    return start


def test_a_restarted_redis_costs_no_error_and_no_stale_page(nodes_on_own_redis, own_redis):
    apps = nodes_on_own_redis()
    alice, bob = sign_up(apps[A], "alice"), sign_up(apps[B], "bob")
    bob.post("/users/alice/follow")
    assert tweet_texts(warm(bob, "/tweets/")) == []

    own_redis.stop()
    assert alice.post("/tweets/", {"tweet": "while Redis was down"}).status_code == 303
    every_page_answers(bob)
    every_page_answers(alice)
    assert tweet_texts(bob.get("/tweets/")) == ["while Redis was down"]

    own_redis.start()
    time.sleep(OUTAGE_SYNC_S * 1.5)
    every_page_answers(bob)
    assert alice.post("/tweets/", {"tweet": "after Redis came back"}).status_code == 303
    assert tweet_texts(warm(bob, "/tweets/")) == ["after Redis came back", "while Redis was down"]
    assert cached_keys(apps[B]), "the cache is used again"


def test_an_eviction_one_node_could_not_make_is_paid_by_another_node_within_the_bound(two_nodes):
    """A Redis that one node cannot reach (a partition; or a pause, for everyone) keeps its data: the
    write could not evict the old page, so it owes the eviction, and any node pays it within the bound."""
    apps = two_nodes(CACHE_SYNC_INTERVAL=OUTAGE_SYNC_S)
    alice, bob = sign_up(apps[A], "alice"), sign_up(apps[B], "bob")
    bob.post("/users/alice/follow")
    assert tweet_texts(warm(bob, "/tweets/")) == []
    alices_page = queries.newest_tweets_by.key(user_id(apps[A], "alice"))
    assert stored(apps[B], alices_page) == ()

    # A's cache talks to nowhere: its reads and writes, and the hook that pays debts before each request.
    backend = apps[A].extensions["tweepy_cache"]
    reachable = backend.client
    backend.client = RedisCache(f"redis://127.0.0.1:{free_port()}/0", backend.prefix, 300, 0.2, OUTAGE_SYNC_S).client
    assert alice.post("/tweets/", {"tweet": "while A was cut off"}).status_code == 303
    every_page_answers(alice)
    assert stored(apps[B], alices_page) == (), "Redis still holds the page the write made stale"
    with apps[B].app_context():
        assert db.session.scalar(select(func.count()).select_from(CacheInvalidation)) == 1, "the eviction is owed"

    # Only B serves from now on: the debt is in the database, not only in A's memory.
    time.sleep(OUTAGE_SYNC_S * 1.5)
    assert tweet_texts(bob.get("/tweets/")) == ["while A was cut off"]
    assert stored(apps[B], alices_page) != ()
    with apps[B].app_context():
        assert db.session.scalar(select(func.count()).select_from(CacheInvalidation)) == 0, "the debt is paid"

    backend.client = reachable
    assert tweet_texts(alice.get("/users/alice/")) == ["while A was cut off"]


# --- gevent ----------------------------------------------------------------------------

GREENLETS = 6
WAIT_S = 0.3

# As uWSGI's gevent-early-monkey-patch does: gevent patches the standard library, then the app loads.
CONCURRENT_WAITS = textwrap.dedent(
    """
    import sys

    from gevent import monkey

    if sys.argv[4] == "patched":
        monkey.patch_all()

    import json, secrets, time

    import gevent

    from tweepy import create_app

    url, greenlets, wait_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    app = create_app({"SECRET_KEY": "x", "CACHE": "redis", "CACHE_URL": url, "CACHE_TIMEOUT_S": 5.0})
    client = app.extensions["tweepy_cache"].client
    client.ping()  # one connection made before the clock starts
    empty = f"tweepy-test:gevent:{secrets.token_hex(4)}"  # a list nobody pushes to: BLPOP waits its timeout

    started = time.perf_counter()
    gevent.joinall([gevent.spawn(client.blpop, [empty], wait_s) for _ in range(greenlets)], raise_error=True)
    print(json.dumps({"seconds": time.perf_counter() - started}))
    """
)


def concurrent_waits(tmp_path, patching: str) -> float:
    completed = subprocess.run(
        [sys.executable, "-c", CONCURRENT_WAITS, redis_url(), str(GREENLETS), str(WAIT_S), patching],
        env={**os.environ, "TWEEPY_INSTANCE_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])["seconds"]


def test_redis_lets_other_greenlets_run_while_it_waits_under_gevent(tmp_path):
    """redis-py talks through the socket module: once gevent has patched it, a wait yields to the hub."""
    seconds = concurrent_waits(tmp_path, "patched")
    assert seconds < GREENLETS * WAIT_S / 2, f"{GREENLETS} waits of {WAIT_S} s took {seconds:.2f} s"


def test_redis_without_gevents_patches_would_serialize_the_greenlets(tmp_path):
    """Why the stage runner patches early: unpatched, every wait for Redis blocks the whole hub."""
    assert concurrent_waits(tmp_path, "unpatched") >= GREENLETS * WAIT_S * 0.9
