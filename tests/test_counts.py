"""A profile's counts under concurrent writers: many sessions following, unfollowing
and posting at once, on SQLite (cache in each process) and on PostgreSQL with Redis
(stage 7's pair); afterwards every profile and list shows what a fresh COUNT says."""

from __future__ import annotations

import random
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.browser import Browser, sign_up
from helpers.pages import csrf_token, profile_counts, user_names
from helpers.postgres import fresh_database
from helpers.services import redis_url
from helpers.stored import FAST_BCRYPT
from sqlalchemy import func, select

from tweepy import create_app
from tweepy.extensions import db
from tweepy.models import Follow, Tweet, User

NAMES = ["ann", "bob", "cyd", "dee"]
SESSIONS_EACH = 3  # several sessions of one user race on the same pairs
STEPS = 30


# The writers here post and follow far faster than a person: the per-account write limits would refuse them.
UNLIMITED_WRITES = {"TWEETS_PER_MINUTE": 100_000, "FOLLOWS_PER_MINUTE": 100_000}


@pytest.fixture(params=["sqlite", "postgresql"])
def counted_app(request, make_app):
    if request.param == "sqlite":
        yield make_app(
            CACHE="local", FRAGMENT_CACHE=True, TIMELINE_FROM_CACHED_PAGES=True, SQLITE_TUNED=True, **UNLIMITED_WRITES
        )
        return
    import redis
    from flask_migrate import upgrade

    prefix = f"tweepy-test-{secrets.token_hex(4)}:"
    with fresh_database("counts") as url:
        settings = {
            "DATABASE_URL": url,
            "SECRET_KEY": "test-secret",
            "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
            "TESTING": True,
            **UNLIMITED_WRITES,
            **{"CACHE": "redis", "CACHE_URL": redis_url(), "CACHE_KEY_PREFIX": prefix, "FRAGMENT_CACHE": True},
        }
        app = create_app(settings)
        with app.app_context():
            upgrade()
        try:
            yield app
        finally:
            with app.app_context():
                db.engine.dispose()
            server = redis.Redis.from_url(redis_url())
            for key in server.scan_iter(f"{prefix}*"):
                server.delete(key)


def counted_afresh(app, name: str) -> dict[str, int]:
    with app.app_context():
        user = db.session.scalar(select(User.id).where(User.name == name))
        count = select(func.count())
        return {
            "tweets": db.session.scalar(count.select_from(Tweet).where(Tweet.author_id == user)),
            "followers": db.session.scalar(count.select_from(Follow).where(Follow.followed_id == user)),
            "following": db.session.scalar(count.select_from(Follow).where(Follow.follower_id == user)),
        }


def names_afresh(app, name: str, listing: str) -> list[str]:
    with app.app_context():
        user = db.session.scalar(select(User.id).where(User.name == name))
        mine, theirs = (
            (Follow.followed_id, Follow.follower_id)
            if listing == "followers"
            else (Follow.follower_id, Follow.followed_id)
        )
        query = select(User.name).join(Follow, theirs == User.id).where(mine == user).order_by(User.id)
        return list(db.session.scalars(query))


def test_counts_equal_a_fresh_count_after_concurrent_follows_unfollows_and_posts(counted_app):
    app = counted_app
    for name in NAMES:
        sign_up(app, name)
    sessions = []
    for name in NAMES:
        for _ in range(SESSIONS_EACH):
            browser = Browser(app.test_client())
            assert browser.login(name).status_code == 303
            sessions.append((name, browser))
    start = threading.Barrier(len(sessions))
    done = []

    def write(name: str, browser: Browser, seed: int) -> None:
        rng = random.Random(seed)
        token = csrf_token(browser.get("/tweets/"))
        start.wait()
        for step in range(STEPS):
            other = rng.choice([n for n in NAMES if n != name])
            action = rng.choice(["follow", "unfollow", "follow", "unfollow", "post"])
            if action == "post":
                path, data = "/tweets/", {"tweet": f"{name} step {step}"}
            else:
                path, data = f"/users/{other}/{action}", {}
            response = browser.client.post(path, data={**data, "csrf_token": token})
            # 503: SQLite's writers queued past their patience; nothing was saved, which the counts must show too.
            assert response.status_code in (303, 503), response.get_data(as_text=True)
            done.append(response.status_code)

    with ThreadPoolExecutor(len(sessions)) as pool:
        for future in [pool.submit(write, name, browser, i) for i, (name, browser) in enumerate(sessions)]:
            future.result()
    assert done.count(303) > len(done) // 2, "too few writes went through to test anything"

    reader = sessions[0][1]
    for name in NAMES:
        assert profile_counts(reader.get(f"/users/{name}/")) == counted_afresh(app, name), name
        for listing in ("followers", "following"):
            assert user_names(reader.get(f"/users/{name}/{listing}/")) == names_afresh(app, name, listing)
