"""Limits that cannot be turned against the people they protect, the same in both stores of
counts (the database, and Redis with THROTTLE_IN_REDIS): nobody else's guesses lock an owner
out of their own device, concurrent guesses get no more hashes than the limit, and a
registration form answers "taken" only within its address's limit. And limits on writes,
so that one account cannot fill the database."""

from __future__ import annotations

import os
import secrets
import threading
import time

import pytest
import redis
from helpers.browser import Browser, sign_up
from helpers.pages import errors
from helpers.services import redis_url
from helpers.stored import PASSWORD, add_users, count, count_attempts

from tweepy import passwords, throttle
from tweepy.models import Follow, Tweet

ATTACKER = "203.0.113.9"
OWNER = "198.51.100.7"


@pytest.fixture(params=["database", "redis"])
def make_throttled_app(request, make_app):
    """An app counting attempts in the database, or in Redis under a key prefix of its own."""
    if request.param == "database":
        yield make_app
        return
    prefix = f"tweepy-test:{os.getpid()}:{secrets.token_hex(4)}:"
    in_redis = {"THROTTLE_IN_REDIS": True, "CACHE_URL": redis_url(), "CACHE_KEY_PREFIX": prefix}
    yield lambda **settings: make_app(**in_redis, **settings)
    client = redis.Redis.from_url(redis_url())
    names = list(client.scan_iter(match=f"throttle:{prefix}*", count=1000))
    if names:
        client.unlink(*names)
    client.close()


def from_address(app, address: str) -> Browser:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return Browser(client)


@pytest.fixture
def slow_hashes(monkeypatch):
    """Counts every password check the app makes, each taking a tenth of a second, as a real cost's would."""
    made = []
    real = passwords.bcrypt.check_password_hash

    def counted(*args):
        made.append(args)
        time.sleep(0.1)
        return real(*args)

    monkeypatch.setattr(passwords.bcrypt, "check_password_hash", counted)
    return made


def test_the_owners_device_that_logged_in_before_is_never_refused_by_others_failures(make_throttled_app):
    app = make_throttled_app(LOGIN_FAILURES_PER_ACCOUNT=5, LOGIN_FAILURES_PER_ADDRESS=5)
    add_users(app, "alice")
    owner = from_address(app, OWNER)
    assert owner.login("alice", PASSWORD).status_code == 303
    assert owner.logout().status_code == 303
    for i in range(20):  # from many addresses, and some from the owner's own
        guesser = from_address(app, OWNER if i % 4 == 0 else f"203.0.113.{i}")
        assert guesser.login("alice", "wrong guess").status_code in (401, 429)

    stranger = from_address(app, "192.0.2.50").login("alice", PASSWORD)
    assert stranger.status_code == 429, "the account-wide limit still slows guessing from new places"
    assert "Too many failed logins for this account" in errors(stranger)[0]
    assert owner.login("alice", PASSWORD).status_code == 303


def test_guesses_from_one_address_do_not_refuse_the_account_from_another(make_throttled_app):
    app = make_throttled_app()
    add_users(app, "alice")
    guesser = from_address(app, ATTACKER)
    for _ in range(10):
        assert guesser.login("alice", "wrong guess").status_code == 401
    assert guesser.login("alice", PASSWORD).status_code == 429
    assert from_address(app, OWNER).login("alice", PASSWORD).status_code == 303


def test_a_successful_login_clears_its_devices_failures(make_throttled_app):
    app = make_throttled_app(LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS=3)
    add_users(app, "alice")
    owner = from_address(app, OWNER)
    for _ in range(3):  # each time two typos and the password: five typos would be refused uncleared
        for _ in range(2):
            assert owner.login("alice", "a typo").status_code == 401
        assert owner.login("alice", PASSWORD).status_code == 303
        assert owner.logout().status_code == 303
    assert [owner.login("alice", "a typo").status_code for _ in range(4)] == [401, 401, 401, 429]


def test_concurrent_wrong_guesses_get_at_most_the_limits_worth_of_hashes(make_throttled_app, slow_hashes):
    app = make_throttled_app(HASHING_SLOTS=30, HASH_WAIT_S=30.0)
    add_users(app, "alice")
    guessers = [from_address(app, ATTACKER) for _ in range(30)]
    statuses = []

    def guess(guesser: Browser) -> None:
        statuses.append(guesser.login("alice", "wrong guess").status_code)

    threads = [threading.Thread(target=guess, args=(g,)) for g in guessers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(set(statuses)) == [401, 429]
    assert len(slow_hashes) <= 10
    assert statuses.count(401) == len(slow_hashes)


def test_successful_logins_leave_no_count_behind(make_throttled_app):
    app = make_throttled_app(LOGIN_FAILURES_PER_ACCOUNT=3, LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS=3)
    add_users(app, "alice")
    for i in range(6):
        assert from_address(app, f"198.51.100.{i % 2}").login("alice", PASSWORD).status_code == 303
    assert from_address(app, ATTACKER).login("alice", PASSWORD).status_code == 303
    assert count_attempts(app) == 0


def test_the_registration_limit_is_reached_before_the_form_says_a_name_is_taken(make_throttled_app):
    app = make_throttled_app(REGISTRATIONS_PER_ADDRESS=3)
    add_users(app, "alice", "bob", "carol", "dave")
    prober = from_address(app, ATTACKER)
    for name in ("alice", "bob", "carol"):
        assert "That name is taken." in errors(prober.register(name))
    refused = prober.register("dave")
    assert refused.status_code == 429
    assert "taken" not in refused.get_data(as_text=True)
    assert "Too many new accounts from your address." in errors(refused)[0]


def test_no_address_is_exempt_unless_configured(make_throttled_app):
    app = make_throttled_app(REGISTRATIONS_PER_ADDRESS=2)
    made = [from_address(app, "127.0.0.1").register(f"local_{i}").status_code for i in range(3)]
    assert made == [303, 303, 429]


# --- writes ---------------------------------------------------------------------------------


def early_in_a_minute() -> None:
    """Start where the minute the writes are counted in cannot end during the test."""
    into = time.time() % throttle.WRITE_WINDOW_S
    if into > throttle.WRITE_WINDOW_S - 10:
        time.sleep(throttle.WRITE_WINDOW_S - into + 0.1)


def test_posting_past_an_accounts_limit_for_the_minute_is_a_429_with_retry_after(make_app):
    app = make_app(TWEETS_PER_MINUTE=3)
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    early_in_a_minute()
    assert [alice.post("/tweets/", {"tweet": f"tweet {i}"}).status_code for i in range(3)] == [303] * 3
    refused = alice.post("/tweets/", {"tweet": "one too many"})
    assert refused.status_code == 429
    assert 0 < int(refused.headers["Retry-After"]) <= throttle.WRITE_WINDOW_S
    assert count(app, Tweet) == 3
    assert bob.post("/tweets/", {"tweet": "someone else's"}).status_code == 303


def test_following_and_unfollowing_past_an_accounts_limit_for_the_minute_is_a_429(make_app):
    app = make_app(FOLLOWS_PER_MINUTE=2)
    alice = sign_up(app, "alice")
    add_users(app, "bob")
    early_in_a_minute()
    assert alice.post("/users/bob/follow").status_code == 303
    assert alice.post("/users/bob/unfollow").status_code == 303
    refused = alice.post("/users/bob/follow")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert count(app, Follow) == 0
