"""CACHE=local: per-process caches kept honest by the invalidation log.

Two uWSGI workers are two app objects on one SQLite file, each with its own in-process cache. What
every backend promises (read-your-writes, a cached page is the uncached page) is tested in
test_cache_backends.py; here, what LocalCache alone does (docs/caching.md): with the write signal
(CACHE_WRITE_SIGNAL) a log out ends every copy of the cookie at once although the user is read from
the cache; without it, everyone else sees a write within CACHE_SYNC_INTERVAL; a process's own write
patches its entries; and what is computed from entries lives as long as they do.
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
from helpers.browser import sign_up
from helpers.caches import cached_keys
from helpers.pages import csrf_token, form_actions, tweet_ids, tweet_texts, user_names
from helpers.stored import add_follow, add_tweets, add_users, user_id
from helpers.worlds import PAGES, OnePersonsBrowser, each_write_of_a_small_world, warm
from sqlalchemy import select

from tweepy import queries
from tweepy.cache import LocalCache, WriteSignal, cache
from tweepy.extensions import db

A, B = 0, 1
# Long enough that only read-your-writes, not the periodic sync, can explain a fresh page.
NEVER = 600.0
SYNC_INTERVAL = 0.2


@pytest.fixture
def two_processes(make_app):
    def start(sync_interval: float, write_signal: bool = False):
        settings = {**CACHED, "CACHE_SYNC_INTERVAL": sync_interval, "CACHE_WRITE_SIGNAL": write_signal}
        return [make_app(**settings) for _ in (A, B)]

    return start


def cache_of(app) -> LocalCache:
    return app.extensions["tweepy_cache"]


# --- read-your-writes -------------------------------------------------------


# --- everybody else, with the write signal: at once ------------------------


def test_a_process_does_not_replay_its_own_write_and_evict_what_it_read_afresh_since(make_app):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=5.0)
    alice = sign_up(app, "alice")
    assert alice.post("/tweets/", {"tweet": "first"}).status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["first"]  # her page, read afresh after her write
    page = queries.newest_tweets_by.key(user_id(app, "alice"))
    kept = cache_of(app).entries[page]

    cache_of(app).synced_at -= 5.0  # the next request replays the log, as one does every CACHE_SYNC_INTERVAL
    assert tweet_texts(alice.get("/tweets/")) == ["first"]
    assert cache_of(app).entries[page] is kept


def test_a_write_made_after_anothers_not_yet_replayed_here_still_replays_it(two_processes):
    apps = two_processes(NEVER)
    bob = sign_up(apps[B], "bob")  # bob's requests all go to B, alice's to A
    alice = sign_up(apps[A], "alice")
    assert alice.post("/users/bob/follow").status_code == 303
    assert tweet_texts(warm(alice, "/tweets/")) == []
    assert bob.post("/tweets/", {"tweet": "bob on B"}).status_code == 303  # not replayed on A yet
    assert alice.post("/tweets/", {"tweet": "alice on A"}).status_code == 303

    assert tweet_texts(alice.get("/tweets/")) == ["alice on A", "bob on B"]


def test_a_post_makes_its_authors_kept_page_in_the_writers_process_without_reading_it_again(make_app, monkeypatch):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    alice = sign_up(app, "alice")
    assert alice.post("/tweets/", {"tweet": "first"}).status_code == 303
    assert tweet_texts(warm(alice, "/tweets/")) == ["first"]
    read, reads = queries.newest_tweets_by.uncached, []
    monkeypatch.setattr(queries.newest_tweets_by, "uncached", lambda *args: reads.append(args) or read(*args))

    assert alice.post("/tweets/", {"tweet": "second"}).status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["second", "first"]
    assert tweet_texts(alice.get("/users/alice/")) == ["second", "first"]
    assert reads == []
    with app.app_context():
        assert cache().entries[queries.newest_tweets_by.key(user_id(app, "alice"))] == read(user_id(app, "alice"))


def test_a_follow_and_an_unfollow_change_whom_the_writer_follows_without_reading_it_again(make_app, monkeypatch):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    bob = sign_up(app, "bob")
    assert bob.post("/tweets/", {"tweet": "bob's"}).status_code == 303
    alice = sign_up(app, "alice")
    assert tweet_texts(warm(alice, "/tweets/")) == []
    read, reads = queries.following_of.uncached, []
    monkeypatch.setattr(queries.following_of, "uncached", lambda *args: reads.append(args) or read(*args))
    following = queries.following_of.key(user_id(app, "alice"))

    assert alice.post("/users/bob/follow").status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["bob's"]
    with app.app_context():
        assert cache().entries[following] == {user_id(app, "bob")} == read(user_id(app, "alice"))
    assert alice.post("/users/bob/unfollow").status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == []
    assert reads == []
    with app.app_context():
        assert cache().entries[following] == frozenset() == read(user_id(app, "alice"))


def test_a_post_made_before_anothers_write_is_replayed_here_leaves_the_page_to_be_read_again(two_processes):
    from tweepy import writes

    apps = two_processes(NEVER)
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    assert alice.on(A).post("/tweets/", {"tweet": "first"}).status_code == 303
    assert tweet_texts(warm(alice.on(A), "/tweets/")) == ["first"]
    alice_id = user_id(apps[A], "alice")
    assert alice.on(B).post("/tweets/", {"tweet": "from her other tab"}).status_code == 303

    with apps[A].test_request_context():  # her tab on A posts before A has replayed that
        writes.post_tweet(alice_id, "third")
        assert queries.newest_tweets_by.key(alice_id) not in cache().entries
    assert tweet_texts(alice.on(A).get("/tweets/")) == ["third", "from her other tab", "first"]


def test_with_the_write_signal_the_user_comes_from_the_cache_and_a_log_out_ends_copies_at_once(two_processes):
    apps = two_processes(NEVER, write_signal=True)
    assert all(cache_of(app).fresh_everywhere for app in apps)
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    assert warm(alice.on(B), "/tweets/").status_code == 200
    assert any(key.startswith("session:") for key in cached_keys(apps[B]))
    stolen = alice.on(B).client.get_cookie("session").value

    assert alice.on(A).post("/logout/").status_code == 303
    thief = apps[B].test_client()
    thief.set_cookie("session", stolen)
    assert thief.get("/tweets/").status_code == 302


def test_without_the_write_signal_the_user_is_read_from_the_database(two_processes):
    apps = two_processes(NEVER, write_signal=False)
    assert not any(cache_of(app).fresh_everywhere for app in apps)
    alice = sign_up(apps[A], "alice")
    assert warm(alice, "/tweets/").status_code == 200
    assert not any(key.startswith("session:") for key in cached_keys(apps[A]))


def test_the_write_signal_is_a_file_beside_the_sqlite_database(make_app, tmp_path):
    app = make_app(**CACHED)
    assert os.path.exists(tmp_path / "tweepy.sqlite3-writes")
    assert WriteSignal.beside("sqlite:///:memory:") is None
    assert WriteSignal.beside("postgresql+psycopg://db.example/tweepy") is None
    signal = cache_of(app).signal
    before = signal.value()
    sign_up(app, "alice").post("/tweets/", {"tweet": "counted"})
    assert signal.value() > before


def test_a_signal_left_by_another_database_costs_one_catch_up_then_none(make_app, tmp_path):
    left_over = WriteSignal(str(tmp_path / "tweepy.sqlite3-writes"))
    for _ in range(7):
        left_over.bump()
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    alice = sign_up(app, "alice")
    alice.get("/tweets/")
    backend = cache_of(app)
    assert backend.signalled == left_over.value()
    synced_at = backend.synced_at
    alice.get("/tweets/")
    assert backend.synced_at == synced_at, "a signal that did not move caused a catch-up"


# --- everybody else, without it: the staleness bound ------------------------


def test_follower_sees_new_tweet_within_staleness_bound(two_processes):
    apps = two_processes(SYNC_INTERVAL)
    alice = sign_up(apps[A], "alice")
    bob = sign_up(apps[B], "bob")  # bob's requests all go to B
    bob.post("/users/alice/follow")
    assert tweet_texts(warm(bob, "/tweets/")) == []
    assert tweet_texts(warm(bob, "/users/alice/")) == []
    assert queries.newest_tweets_by.key(user_id(apps[A], "alice")) in cached_keys(apps[B])

    alice.post("/tweets/", {"tweet": "hello followers"})
    time.sleep(SYNC_INTERVAL * 1.5)
    assert tweet_texts(bob.get("/tweets/")) == ["hello followers"]
    assert tweet_texts(bob.get("/users/alice/")) == ["hello followers"]


def test_reader_sees_deletes_and_new_users_within_staleness_bound(two_processes):
    apps = two_processes(SYNC_INTERVAL)
    alice = sign_up(apps[A], "alice")
    alice.post("/tweets/", {"tweet": "soon gone"})
    bob = sign_up(apps[B], "bob")
    bob.post("/users/alice/follow")
    warmed = warm(bob, "/tweets/")
    assert tweet_texts(warmed) == ["soon gone"]
    assert user_names(warm(bob, "/users/")) == ["alice", "bob"]

    alice.post(f"/tweets/{tweet_ids(warmed)[0]}/delete")
    sign_up(apps[A], "carol")
    time.sleep(SYNC_INTERVAL * 1.5)
    assert tweet_texts(bob.get("/tweets/")) == []
    assert user_names(bob.get("/users/")) == ["alice", "bob", "carol"]


# --- a cached page is the page ----------------------------------------------

CACHED = {"CACHE": "local", "TIMELINE_FROM_CACHED_PAGES": True, "FRAGMENT_CACHE": True}


@pytest.mark.parametrize("settings", [{"CACHE": "none"}, CACHED], ids=["uncached", "cached"])
def test_pages_show_the_same_content_with_or_without_the_cache(make_app, settings):
    app = make_app(**settings, CACHE_SYNC_INTERVAL=NEVER)
    for people in each_write_of_a_small_world(app):
        for browser in people.values():  # read everything between writes, filling the cache
            for page in PAGES:
                browser.get(page)
    alice = people["alice"]
    assert tweet_texts(alice.get("/tweets/")) == ["bob 2", "alice 1", "bob 1"]
    assert tweet_texts(alice.get("/users/bob/")) == ["bob 2", "bob 1"]
    assert tweet_texts(alice.get("/users/carol/")) == ["carol 1"]
    users = alice.get("/users/")
    assert user_names(users) == ["alice", "bob", "carol", "dave"]
    actions = form_actions(users)
    assert "/users/bob/unfollow" in actions and "/users/carol/follow" in actions
    assert "/users/carol/follow" in form_actions(alice.get("/users/carol/"))
    assert tweet_texts(people["bob"].get("/tweets/")) == ["bob 2", "alice 1", "bob 1"]


# --- the merged timeline ----------------------------------------------------


@pytest.mark.parametrize("tweets_each", [3, 40, 120])
def test_cached_timeline_merge_returns_the_same_rows_as_the_sql_query(make_app, tweets_each):
    uncached, cached = make_app(CACHE="none"), make_app(CACHE="local", TIMELINE_FROM_CACHED_PAGES=True)
    reader, *authors, stranger = add_users(uncached, "reader", "a1", "a2", "a3", "stranger")
    for author in authors:
        add_follow(uncached, reader, author)
    for i in range(tweets_each):  # interleaved, unevenly: a1 twice as often as the others
        for author in (authors[0], reader, authors[0], authors[1], stranger, authors[2]):
            add_tweets(uncached, author, f"tweet {i} by {author}")

    with uncached.app_context():
        assert not cache().enabled
        expected = queries.timeline_of(reader)
    assert len(expected) == min(50, tweets_each * 5)
    assert stranger not in {row.author_id for row in expected}

    with cached.app_context():
        assert cache().enabled
        merged = queries.timeline_of(reader)
        assert {queries.newest_tweets_by.key(author) for author in (reader, *authors)} <= set(cache().entries)
        assert queries.timeline_of(reader) == merged  # again, now all from the cache
    assert merged == expected


def test_a_read_asked_for_many_arguments_at_once_gives_what_each_call_gives(make_app):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    authors = add_users(app, "a1", "a2", "a3")
    for author in authors:
        add_tweets(app, author, f"by {author}")
    with app.test_request_context():
        first = queries.newest_tweets_by(authors[0])  # one kept already, two not
        many = queries.newest_tweets_by.many((author,) for author in authors)
        assert many[0] is first
        assert many == [queries.newest_tweets_by.uncached(author) for author in authors]
        assert {queries.newest_tweets_by.key(author) for author in authors} <= cached_keys(app)


# --- what is computed from entries -------------------------------------------


def test_a_result_computed_from_entries_is_kept_while_they_are_the_very_same_objects():
    local = LocalCache(max_bytes=1 << 20, ttl=60, sync_interval=NEVER)
    page_a, page_b = (1, 2), (3,)
    computed = []

    def merge(*pages):
        computed.append(pages)
        return tuple(sorted(x for page in pages for x in page))

    assert local.derived("k", (page_a, page_b), lambda: merge(page_a, page_b)) == (1, 2, 3)
    assert local.derived("k", (page_a, page_b), lambda: merge(page_a, page_b)) == (1, 2, 3)
    assert len(computed) == 1
    equal_but_new = tuple(list(page_a))  # a page read again: equal, but not the same object
    assert local.derived("k", (equal_but_new, page_b), lambda: merge(equal_but_new, page_b)) == (1, 2, 3)
    assert len(computed) == 2
    assert local.derived("k", (page_a,), lambda: merge(page_a)) == (1, 2)  # one input fewer
    assert len(computed) == 3


def test_a_request_waiting_for_the_last_connection_never_holds_up_the_request_holding_it(make_app, monkeypatch):
    """Two requests replay the log at once, with one connection in the pool: the one holding it must not wait
    for the one waiting for it, as it would if the replay read the log with the cache's lock held."""
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=1.0, DB_POOL_SIZE=1, DB_POOL_OVERFLOW=0, DB_POOL_TIMEOUT=3)
    backend = cache_of(app)
    with app.app_context():
        backend.sync()
    held, asking = threading.Event(), threading.Event()
    execute, errors = db.session.execute, []

    def execute_and_say(*args, **kwargs):
        if threading.current_thread().name == "needing":
            asking.set()  # about to wait for the connection the other request holds
        return execute(*args, **kwargs)

    monkeypatch.setattr(db.session, "execute", execute_and_say)

    def request(name: str) -> None:
        try:
            with app.test_request_context():
                if name == "holding":
                    db.session.execute(select(1))  # a request that has read something holds the connection
                    held.set()
                    asking.wait(5)
                else:
                    held.wait(5)
                backend.synced_at = time.monotonic() - 2.0  # due to replay the log
                backend.sync()
        except Exception as error:  # noqa: BLE001 - what went wrong is the test's answer
            errors.append(f"{name}: {error!r}")

    threads = [threading.Thread(target=request, args=(name,), name=name) for name in ("holding", "needing")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == [], "a replay waited for the pool with the lock held, and the pool gave up"


@pytest.fixture
def local_cache(make_app):
    """The LocalCache of an app, used within one of its requests, as the reads use it."""
    app = make_app(**CACHED, CACHE_TTL=60, CACHE_SYNC_INTERVAL=NEVER)
    with app.test_request_context():
        yield cache()


def test_a_result_computed_from_keyed_entries_is_kept_until_one_of_them_is_evicted(local_cache):
    computed = []

    def merge():
        computed.append(1)
        return (1, 2, 3), ["page:a", "page:b"]

    first = local_cache.derived_from_keys("k", merge)
    assert local_cache.derived_from_keys("k", merge) is first
    local_cache._evict(["page:elsewhere"])
    assert local_cache.derived_from_keys("k", merge) is first
    assert len(computed) == 1, "an eviction of an entry it was not computed from leaves it be"
    local_cache._evict(["page:b"])
    again = local_cache.derived_from_keys("k", merge)
    assert len(computed) == 2
    assert again is first, "computed again and equal: the very object kept, so what was derived from it stands"


def test_a_keyed_result_is_not_kept_if_an_entry_it_read_was_evicted_while_it_was_computed(local_cache):
    computed = []

    def merge_while_a_write_evicts_page_b():
        computed.append(1)
        if len(computed) == 1:
            local_cache._evict(["page:b"])  # another greenlet's write commits mid-way
        return (len(computed),), ["page:a", "page:b"]

    assert local_cache.derived_from_keys("k", merge_while_a_write_evicts_page_b) == (1,)
    assert local_cache.derived_from_keys("k", merge_while_a_write_evicts_page_b) == (2,)
    assert local_cache.derived_from_keys("k", merge_while_a_write_evicts_page_b) == (2,)
    assert len(computed) == 2


def test_a_keyed_result_ends_with_its_ttl_and_with_the_whole_cache(local_cache, monkeypatch):
    computed = []

    def merge():
        computed.append(1)
        return (len(computed),), ["page:a"]

    assert local_cache.derived_from_keys("k", merge) == (1,)
    later = time.monotonic() + 60
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert local_cache.derived_from_keys("k", merge) == (2,)
    assert local_cache.derived_from_keys("k", merge) == (2,)
    local_cache.synced_at = float("-inf")  # asleep long enough to have missed log entries: drops everything
    local_cache.sync()
    assert not local_cache.dependents
    assert local_cache.derived_from_keys("k", merge) == (3,)


def test_whom_a_keyed_result_no_longer_reads_no_longer_ends_it_and_the_pairs_kept_are_bounded(local_cache, monkeypatch):
    reads = [["following:1", "page:a", "page:b"]]
    computed = []

    def merge():
        computed.append(1)
        return (len(computed),), reads[0]

    local_cache.derived_from_keys("k", merge)
    local_cache._evict(["following:1"])  # an unfollow of b
    reads[0] = ["following:1", "page:a"]
    assert local_cache.derived_from_keys("k", merge) == (2,)
    assert local_cache.dependencies == 2
    local_cache._evict(["page:b"])
    assert local_cache.derived_from_keys("k", merge) == (2,) and len(computed) == 2

    monkeypatch.setattr("tweepy.cache.local.DEPENDENCIES_REMEMBERED", 3)
    local_cache.derived_from_keys("other", lambda: ((0,), ["page:c", "page:d"]))
    assert local_cache.dependencies == 0 and not local_cache.dependents, "past the bound, all start afresh"
    assert local_cache.derived_from_keys("k", merge) == (3,)


def test_caches_that_hand_out_new_objects_compute_every_time():
    from tweepy.cache import NoCache

    computed = []
    for _ in range(2):
        NoCache().derived("k", ((1,),), lambda: computed.append(1))
        NoCache().derived_from_keys("k", lambda: (computed.append(1), ["page:a"]))
    assert len(computed) == 4


def test_the_kept_merge_and_its_html_follow_a_new_tweet_of_a_followed_author(make_app):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    reader = sign_up(app, "reader")
    author = sign_up(app, "author")
    reader.post("/users/author/follow")
    author.post("/tweets/", {"tweet": "first"})
    assert tweet_texts(reader.get("/tweets/"))[0] == "first"
    assert tweet_texts(reader.get("/tweets/"))[0] == "first"  # now kept
    author.post("/tweets/", {"tweet": "second"})
    assert tweet_texts(reader.get("/tweets/"))[:2] == ["second", "first"]


def test_own_tweets_from_kept_html_carry_this_pages_token_and_place(make_app):
    app = make_app(**CACHED, CACHE_SYNC_INTERVAL=NEVER)
    writer = sign_up(app, "writer")
    writer.post("/tweets/", {"tweet": "mine"})
    first = writer.get("/tweets/")
    writer.logout()
    assert writer.login("writer").status_code == 303
    again = writer.get("/tweets/")  # the same rows, so the kept HTML, with a new session's token
    tokens = set(re.findall(r'name="csrf_token" type="hidden" value="([^"]+)"', again.get_data(as_text=True)))
    assert tokens == {csrf_token(again)} != {csrf_token(first)}, "every form of the page, delete included"
    delete = next(action for action in form_actions(again) if action.endswith("/delete"))
    assert writer.client.post(delete, data={"csrf_token": csrf_token(again), "next": "/tweets/"}).status_code == 303
    assert tweet_texts(writer.get("/tweets/")) == []
