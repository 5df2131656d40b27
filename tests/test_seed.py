"""``flask --app tweepy seed``: deterministic benchmark data the locust protocol can log in to."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers.pages import csrf_token, tweet_texts
from sqlalchemy import select

from tweepy.extensions import db
from tweepy.models import Follow, Tweet, User
from tweepy.passwords import connection_given_back, password_matches

USERS, TWEETS, FOLLOWS = 30, 500, 4


def seed(app, *options: str):
    """Run the command as the ``flask`` CLI does, with the app's context pushed."""
    with app.app_context():
        return app.test_cli_runner().invoke(args=["seed", *options])


def seed_small(app, *extra: str):
    result = seed(app, "--users", str(USERS), "--tweets", str(TWEETS), "--follows", str(FOLLOWS), *extra)
    assert result.exit_code == 0, result.output
    return result


def snapshot(app) -> dict:
    """Everything the seed decides (the tweets' times depend on today, so not those)."""
    with app.app_context():
        return {
            "users": db.session.execute(select(User.id, User.name, User.email).order_by(User.id)).all(),
            "tweets": db.session.execute(select(Tweet.id, Tweet.author_id, Tweet.text).order_by(Tweet.id)).all(),
            "follows": set(db.session.execute(select(Follow.follower_id, Follow.followed_id)).all()),
        }


@pytest.fixture
def seeded(app):
    seed_small(app)
    return app


def test_seed_creates_users_user1_to_n(seeded):
    users = snapshot(seeded)["users"]
    assert [u.name for u in users] == [f"user{i}" for i in range(1, USERS + 1)]
    assert {u.email for u in users} == {f"user{i}@example.com" for i in range(1, USERS + 1)}


def test_every_seeded_user_logs_in_with_tweepy123(seeded, client):
    with seeded.app_context():
        hashes = set(db.session.scalars(select(User.password_hash)))
        assert len(hashes) == 1  # hashed once, reused
        (shared,) = hashes
        with connection_given_back():
            assert password_matches(shared, "tweepy123")
            assert not password_matches(shared, "tweepy124")
    response = client.post(
        "/", data={"name": f"user{USERS}", "password": "tweepy123", "csrf_token": csrf_token(client.get("/"))}
    )
    assert response.status_code == 303


def test_seed_creates_the_tweets_spread_over_authors_and_time(seeded):
    with seeded.app_context():
        tweets = db.session.execute(
            select(Tweet.id, Tweet.author_id, Tweet.text, Tweet.posted).order_by(Tweet.id)
        ).all()
    assert len(tweets) == TWEETS
    authors = Counter(t.author_id for t in tweets)
    assert set(authors) <= set(range(1, USERS + 1)) and len(authors) > USERS // 2
    assert all(0 < len(t.text) <= 280 for t in tweets)
    posted = [t.posted for t in tweets]
    assert posted == sorted(posted)  # newest first by id is newest first by time
    assert posted[-1] - posted[0] > (posted[1] - posted[0]) * (TWEETS // 2)


def test_every_seeded_user_follows_k_others_and_nobody_themselves(seeded):
    pairs = snapshot(seeded)["follows"]
    assert Counter(follower for follower, _ in pairs) == {i: FOLLOWS for i in range(1, USERS + 1)}
    assert all(follower != followed for follower, followed in pairs)
    assert {followed for _, followed in pairs} <= set(range(1, USERS + 1))


def test_seed_refuses_a_database_that_has_users(seeded):
    before = snapshot(seeded)
    result = seed(seeded, "--users", "5", "--tweets", "5", "--follows", "1")
    assert result.exit_code != 0
    assert "already has users" in result.output
    assert snapshot(seeded) == before


def test_seed_if_empty_leaves_a_database_with_users_alone(seeded):
    before = snapshot(seeded)
    result = seed(seeded, "--users", "5", "--tweets", "5", "--follows", "1", "--if-empty")
    assert result.exit_code == 0
    assert snapshot(seeded) == before


def test_seed_refuses_more_follows_than_other_users(app):
    result = seed(app, "--users", "3", "--tweets", "5", "--follows", "3")
    assert result.exit_code != 0
    assert "--follows must be smaller than --users" in result.output
    assert snapshot(app)["users"] == []


def test_the_same_seed_gives_the_same_data(make_app, tmp_path):
    first = make_app(DATABASE_URL=f"sqlite:///{tmp_path / 'first.sqlite3'}")
    second = make_app(DATABASE_URL=f"sqlite:///{tmp_path / 'second.sqlite3'}")
    seed_small(first)
    seed_small(second)
    assert snapshot(first) == snapshot(second)


def test_another_seed_gives_other_data(make_app, tmp_path):
    first = make_app(DATABASE_URL=f"sqlite:///{tmp_path / 'first.sqlite3'}")
    second = make_app(DATABASE_URL=f"sqlite:///{tmp_path / 'second.sqlite3'}")
    seed_small(first)
    seed_small(second, "--seed", "7")
    assert snapshot(first)["tweets"] != snapshot(second)["tweets"]
    assert snapshot(first)["users"] == snapshot(second)["users"]


def test_seeded_timeline_shows_followed_users_tweets(seeded, client):
    client.post("/", data={"name": "user1", "password": "tweepy123", "csrf_token": csrf_token(client.get("/"))})
    with seeded.app_context():
        followed = set(db.session.scalars(select(Follow.followed_id).where(Follow.follower_id == 1))) | {1}
        expected = db.session.scalars(
            select(Tweet.text).where(Tweet.author_id.in_(followed)).order_by(Tweet.id.desc()).limit(50)
        ).all()
    assert len(expected) == 50
    assert tweet_texts(client.get("/tweets/")) == expected
