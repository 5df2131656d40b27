"""THROTTLE_IN_REDIS: failed logins and registrations counted in Redis, shared by every node.

Two app objects on one database and one Redis stand in for two nodes. Each
test counts under a key prefix of its own and deletes its keys afterwards, so
the tests can share the machine's Redis with anyone. The promises
(throttle.py): the limits hold as they do in the database, on every node,
without a row written; the counts expire with their window; and a Redis that
cannot be reached costs no error and no limit, the database counts instead.
"""

from __future__ import annotations

import os
import secrets
import socket

import pytest
import redis
from helpers.browser import Browser
from helpers.pages import errors
from helpers.services import redis_url
from helpers.stored import PASSWORD, add_users, count, count_attempts

from tweepy import throttle
from tweepy.models import User

A, B = 0, 1
ATTACKER = "203.0.113.9"
IN_REDIS = {"THROTTLE_IN_REDIS": True, "LOGIN_FAILURES_PER_ACCOUNT": 3, "REGISTRATIONS_PER_ADDRESS": 2}


def from_address(app, address: str) -> Browser:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return Browser(client)


def keys_under(client: redis.Redis, prefix: str) -> set[str]:
    return {name.decode() for name in client.scan_iter(match=prefix + "*", count=1000)}


@pytest.fixture
def prefix():
    name = f"tweepy-test:{os.getpid()}:{secrets.token_hex(4)}:"
    yield name
    client = redis.Redis.from_url(redis_url())
    names = keys_under(client, name) | keys_under(client, f"throttle:{name}")
    if names:
        client.unlink(*names)
    client.close()


@pytest.fixture
def two_nodes(make_app, prefix):
    def start(**settings):
        overrides = {**IN_REDIS, "CACHE_URL": redis_url(), "CACHE_KEY_PREFIX": prefix, **settings}
        return [make_app(**overrides) for _ in (A, B)]

    return start


def counts_of(app) -> throttle.RedisCounts:
    return app.extensions["tweepy_throttle"]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- counted in Redis, refused on every node ----------------------------------------


def test_failed_logins_are_counted_in_redis_and_refused_on_every_node(two_nodes):
    apps = two_nodes()
    add_users(apps[A], "alice")
    for i in range(3):
        assert from_address(apps[A], f"198.51.100.{i}").login("alice", "wrong guess").status_code == 401

    for app in apps:
        refused = from_address(app, "198.51.100.99").login("alice", PASSWORD)
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) > 0
        assert "Too many failed logins for this account" in errors(refused)[0]
    assert count_attempts(apps[A]) == 0, "not a row in the database"
    counts = counts_of(apps[A])
    assert counts.client.zcard(counts.name(throttle.FAILED_LOGIN_BY_ACCOUNT, "alice")) == 3


def test_one_address_guessing_many_accounts_is_refused_on_every_node(two_nodes):
    apps = two_nodes(LOGIN_FAILURES_PER_ADDRESS=2)
    add_users(apps[A], "alice", "bob", "carol")
    assert from_address(apps[A], ATTACKER).login("alice", "wrong guess").status_code == 401
    assert from_address(apps[B], ATTACKER).login("bob", "wrong guess").status_code == 401
    assert from_address(apps[A], ATTACKER).login("carol", PASSWORD).status_code == 429
    assert from_address(apps[B], "198.51.100.1").login("carol", PASSWORD).status_code == 303
    assert count_attempts(apps[A]) == 0


def test_registrations_per_address_are_counted_in_redis_and_refused_on_every_node(two_nodes):
    apps = two_nodes()
    assert from_address(apps[A], ATTACKER).register("sock_0").status_code == 303
    assert from_address(apps[B], ATTACKER).register("sock_1").status_code == 303

    for node, app in enumerate(apps):
        refused = from_address(app, ATTACKER).register(f"late_{node}")
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) > 0
        assert "Too many new accounts from your address." in errors(refused)[0]
    assert count(apps[A], User) == 2
    assert count_attempts(apps[A]) == 0, "not a row in the database"
    assert from_address(apps[B], "198.51.100.1").register("someone").status_code == 303


def test_the_counts_live_apart_from_the_cache_and_survive_its_drop(two_nodes, prefix):
    apps = two_nodes(CACHE="redis")
    add_users(apps[A], "alice")
    from_address(apps[A], ATTACKER).login("alice", "wrong guess")
    client = counts_of(apps[A]).client
    assert keys_under(client, f"throttle:{prefix}") == {
        f"throttle:{prefix}{throttle.FAILED_LOGIN_BY_ACCOUNT}:alice",
        f"throttle:{prefix}{throttle.FAILED_LOGIN_BY_ADDRESS}:{ATTACKER}",
        f"throttle:{prefix}{throttle.FAILED_LOGIN_FROM_HERE}:{throttle.from_here('alice', ATTACKER)}",
    }

    apps[A].extensions["tweepy_cache"].drop_everything()
    assert len(keys_under(client, f"throttle:{prefix}")) == 3


# --- they expire -----------------------------------------------------------------------


def test_the_counts_expire_within_their_window(two_nodes):
    apps = two_nodes(LOGIN_FAILURE_WINDOW_S=60, REGISTRATION_WINDOW_S=120)
    add_users(apps[A], "alice")
    from_address(apps[A], ATTACKER).login("alice", "wrong guess")
    from_address(apps[A], ATTACKER).register("newcomer")
    counts = counts_of(apps[A])
    assert 0 < counts.client.ttl(counts.name(throttle.FAILED_LOGIN_BY_ACCOUNT, "alice")) <= 60
    assert 0 < counts.client.ttl(counts.name(throttle.FAILED_LOGIN_BY_ADDRESS, ATTACKER)) <= 60
    assert 0 < counts.client.ttl(counts.name(throttle.REGISTRATION, ATTACKER)) <= 120


def test_failures_older_than_the_window_no_longer_count(two_nodes):
    apps = two_nodes(LOGIN_FAILURE_WINDOW_S=0)
    add_users(apps[A], "alice")
    for _ in range(5):
        assert from_address(apps[A], ATTACKER).login("alice", "wrong guess").status_code == 401


# --- Redis away: the database counts ------------------------------------------------------


@pytest.fixture
def no_redis(make_app, monkeypatch):
    """Apps whose Redis does not answer; every request asks it again (no pause after a failure)."""
    monkeypatch.setattr(throttle, "REDIS_RETRY_S", 0.0)

    def start(**settings):
        unreachable = {"CACHE_URL": f"redis://127.0.0.1:{closed_port()}/0", "CACHE_TIMEOUT_S": 0.05}
        return make_app(**{**IN_REDIS, **unreachable, **settings})

    return start


def test_with_redis_unreachable_failed_logins_are_counted_and_refused_from_the_database(no_redis, monkeypatch):
    app = no_redis()
    add_users(app, "alice")
    warned = []
    monkeypatch.setattr(throttle.log, "warning", lambda message, *args: warned.append(message % args))
    for _ in range(3):
        assert from_address(app, ATTACKER).login("alice", "wrong guess").status_code == 401
    refused = from_address(app, ATTACKER).login("alice", PASSWORD)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert count_attempts(app) == 9, "each failure against the account, from here and in all, and the address"
    assert len(warned) == 1 and "unreachable" in warned[0], "one warning an outage, not one a request"


def test_with_redis_unreachable_registrations_are_counted_and_refused_from_the_database(no_redis):
    app = no_redis()
    for i in range(2):
        assert from_address(app, ATTACKER).register(f"sock_{i}").status_code == 303
    refused = from_address(app, ATTACKER).register("sock_2")
    assert refused.status_code == 429
    assert count(app, User) == 2
    assert count_attempts(app) == 2


def test_after_an_outage_the_counts_go_back_to_redis(two_nodes, monkeypatch):
    monkeypatch.setattr(throttle, "REDIS_RETRY_S", 0.0)
    app = two_nodes()[A]
    add_users(app, "alice")
    counts = counts_of(app)
    alices = counts.name(throttle.FAILED_LOGIN_BY_ACCOUNT, "alice")
    reachable = counts.client
    from_address(app, ATTACKER).login("alice", "wrong guess")

    counts.client = throttle.RedisCounts(f"redis://127.0.0.1:{closed_port()}/0", "", 0.05).client
    from_address(app, ATTACKER).login("alice", "wrong guess")
    assert count_attempts(app) == 3, "the account from here and in all, the address: in the database meanwhile"

    counts.client = reachable
    from_address(app, ATTACKER).login("alice", "wrong guess")
    assert reachable.zcard(alices) == 2
    assert count_attempts(app) == 3
