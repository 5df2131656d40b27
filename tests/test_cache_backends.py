"""What every cache backend promises, written once and run against each (LocalCache, RedisCache, NearCache).

Two app objects on one database stand in for two processes (or two nodes), and one person's browser
keeps one session cookie whichever of them serves each request. Every backend promises the writer
their own write at once on every process, and a cached page byte for byte the uncached one; a
backend that is fresh everywhere (LocalCache with CACHE_WRITE_SIGNAL, RedisCache) promises everyone
else the write at once too. What only one backend does is tested in test_cache.py and
test_redis_cache.py.
"""

from __future__ import annotations

import pytest
from helpers.browser import sign_up
from helpers.caches import cached_keys, drop_prefix, new_prefix
from helpers.pages import form_actions, tweet_ids, tweet_texts, user_names, without_csrf_tokens
from helpers.services import redis_url
from helpers.stored import user_id
from helpers.worlds import PAGES, OnePersonsBrowser, each_write_of_a_small_world, warm

from tweepy import queries

A, B = 0, 1
# Long enough that only the backend's promise, never the periodic sync, can explain a fresh page.
NEVER = 600.0
CACHED = {"TIMELINE_FROM_CACHED_PAGES": True, "FRAGMENT_CACHE": True, "CACHE_SYNC_INTERVAL": NEVER}
BACKENDS = {
    # Without the write signal, only the writer's session tells another process to catch up.
    "local": {"CACHE": "local", "CACHE_WRITE_SIGNAL": False},
    "local-signal": {"CACHE": "local", "CACHE_WRITE_SIGNAL": True},
    "redis": {"CACHE": "redis"},
    # Entries in each process in front of Redis, fresh by the log: like "local", only the writer at once.
    "near": {"CACHE": "redis", "CACHE_NEAR": True},
}
EVERY_BACKEND = pytest.mark.parametrize("two_processes", ["local", "redis", "near"], indirect=True)
FRESH_EVERYWHERE = pytest.mark.parametrize("two_processes", ["local-signal", "redis"], indirect=True)


@pytest.fixture
def two_processes(request, make_app):
    """Two apps on one database, whose cache is the backend named by the test's parameter."""
    settings = {**CACHED, **BACKENDS[request.param]}
    if settings["CACHE"] == "redis":
        url, prefix = redis_url(), new_prefix()
        settings.update(CACHE_URL=url, CACHE_KEY_PREFIX=prefix)
        request.addfinalizer(lambda: drop_prefix(url, prefix))
    return [make_app(**settings) for _ in (A, B)]


# --- read-your-writes -------------------------------------------------------


@EVERY_BACKEND
def test_writer_sees_own_new_tweet_on_the_other_process_at_once(two_processes):
    apps = two_processes
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    assert tweet_texts(warm(alice.on(B), "/tweets/")) == []
    assert queries.newest_tweets_by.key(user_id(apps[A], "alice")) in cached_keys(apps[B])

    assert alice.on(A).post("/tweets/", {"tweet": "posted on A"}).status_code == 303
    assert tweet_texts(alice.on(B).get("/tweets/")) == ["posted on A"]
    assert tweet_texts(alice.on(B).get("/users/alice/")) == ["posted on A"]


@EVERY_BACKEND
def test_writer_sees_followed_users_tweets_on_the_other_process_at_once(two_processes):
    apps = two_processes
    sign_up(apps[A], "bob").post("/tweets/", {"tweet": "bob's news"})
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    assert tweet_texts(warm(alice.on(B), "/tweets/")) == []
    assert "/users/bob/follow" in form_actions(warm(alice.on(B), "/users/bob/"))
    assert queries.following_of.key(user_id(apps[A], "alice")) in cached_keys(apps[B])

    assert alice.on(A).post("/users/bob/follow").status_code == 303
    assert tweet_texts(alice.on(B).get("/tweets/")) == ["bob's news"]
    assert "/users/bob/unfollow" in form_actions(alice.on(B).get("/users/bob/"))


@EVERY_BACKEND
def test_writer_stops_seeing_unfollowed_users_tweets_on_the_other_process_at_once(two_processes):
    apps = two_processes
    sign_up(apps[A], "bob").post("/tweets/", {"tweet": "bob's news"})
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    alice.on(A).post("/users/bob/follow")
    assert tweet_texts(warm(alice.on(B), "/tweets/")) == ["bob's news"]
    assert "/users/bob/unfollow" in form_actions(warm(alice.on(B), "/users/bob/"))

    assert alice.on(A).post("/users/bob/unfollow").status_code == 303
    assert tweet_texts(alice.on(B).get("/tweets/")) == []
    assert "/users/bob/follow" in form_actions(alice.on(B).get("/users/bob/"))


@EVERY_BACKEND
def test_writer_stops_seeing_deleted_tweet_on_the_other_process_at_once(two_processes):
    apps = two_processes
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    alice.on(A).post("/tweets/", {"tweet": "keep"})
    alice.on(A).post("/tweets/", {"tweet": "oops"})
    warmed = warm(alice.on(B), "/tweets/")
    assert tweet_texts(warmed) == ["oops", "keep"]
    assert tweet_texts(warm(alice.on(B), "/users/alice/")) == ["oops", "keep"]

    oops = tweet_ids(warmed)[0]
    assert alice.on(A).post(f"/tweets/{oops}/delete").status_code == 303
    assert tweet_texts(alice.on(B).get("/tweets/")) == ["keep"]
    assert tweet_texts(alice.on(B).get("/users/alice/")) == ["keep"]


@EVERY_BACKEND
def test_new_user_finds_their_profile_and_name_on_the_other_process_at_once(two_processes):
    apps = two_processes
    sign_up(apps[B], "bob")
    carol = OnePersonsBrowser(*apps)
    assert warm(carol.on(B), "/users/carol/").status_code == 404  # looked before signing up
    assert queries.user_named.key("carol") not in cached_keys(apps[B]), "a miss is not kept"
    warm(sign_up(apps[B], "watcher"), "/users/")  # B caches the users list without carol
    assert queries.users_page.key(1) in cached_keys(apps[B])

    assert carol.on(A).register("carol").status_code == 303
    assert carol.on(B).get("/users/carol/").status_code == 200
    assert user_names(carol.on(B).get("/users/")) == ["bob", "watcher", "carol"]


@EVERY_BACKEND
def test_read_your_writes_holds_when_writes_alternate_between_processes(two_processes):
    apps = two_processes
    alice = OnePersonsBrowser(*apps)
    alice.on(A).register("alice")
    posted = []
    for i in range(6):
        writer, reader = (A, B) if i % 2 == 0 else (B, A)
        warm(alice.on(reader), "/tweets/")
        alice.on(writer).post("/tweets/", {"tweet": f"tweet {i} on {'AB'[writer]}"})
        posted.insert(0, f"tweet {i} on {'AB'[writer]}")
        assert tweet_texts(alice.on(reader).get("/tweets/")) == posted


# --- everybody else, where the backend is fresh everywhere --------------------


@FRESH_EVERYWHERE
def test_a_follower_sees_a_new_tweet_on_the_other_process_at_once(two_processes):
    apps = two_processes
    assert all(app.extensions["tweepy_cache"].fresh_everywhere for app in apps)
    alice = sign_up(apps[A], "alice")
    bob = sign_up(apps[B], "bob")  # bob's requests all go to B
    bob.post("/users/alice/follow")
    assert tweet_texts(warm(bob, "/tweets/")) == []
    assert queries.newest_tweets_by.key(user_id(apps[A], "alice")) in cached_keys(apps[B])

    alice.post("/tweets/", {"tweet": "hello followers"})
    assert tweet_texts(bob.get("/tweets/")) == ["hello followers"]
    assert tweet_texts(bob.get("/users/alice/")) == ["hello followers"]


# --- a cached page is the page ----------------------------------------------


@FRESH_EVERYWHERE
@pytest.mark.parametrize("page", PAGES)
def test_cached_page_is_byte_for_byte_the_uncached_page_after_every_write(two_processes, make_app, page):
    writer_process, reader_process = two_processes
    uncached = make_app(CACHE="none")
    for people in each_write_of_a_small_world(writer_process):
        for name, browser in people.items():
            for process in (writer_process, reader_process):
                # The same person (same session cookie) asking a process with the cache and one without.
                cookie = browser.client.get_cookie("session").value
                cached, other = process.test_client(), uncached.test_client()
                cached.set_cookie("session", cookie)
                other.set_cookie("session", cookie)
                from_cache = cached.get(page)
                assert from_cache.status_code == 200
                assert without_csrf_tokens(from_cache) == without_csrf_tokens(other.get(page)), name
                cached.get(page)  # now surely cached, for the next write to make stale
