"""The reads the protocol makes use indexes: EXPLAIN QUERY PLAN of the real
statements, captured as the query functions run them, on empty and on seeded,
ANALYZEd tables (the schema at head; before migration 0003 the timeline scans)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tweepy import create_app, queries
from tweepy.cli import query_plans
from tweepy.extensions import db


@pytest.fixture(params=["empty", "seeded"])
def data(request, app):
    """The plans on empty tables, and on seeded tables the planner has statistics for (ANALYZE)."""
    if request.param == "seeded":
        result = app.test_cli_runner().invoke(args=["seed", "--users", "300", "--tweets", "6000", "--follows", "15"])
        assert result.exit_code == 0, result.output
        with app.app_context():
            db.session.execute(text("ANALYZE"))
            db.session.commit()
    return request.param


@pytest.fixture
def plans(app, data):
    """Run a read and return the query plan of each statement it sent."""

    def explain(read, *args):
        with app.test_request_context():
            statements = query_plans(read, *args)
        assert statements, f"{read.__name__} sent no query"
        return [statement.plan for statement in statements]

    return explain


def test_timeline_reads_each_authors_index_range_without_scanning_tweets(plans):
    for plan in plans(queries.timeline_of, 1) + plans(queries.timeline_of, 1, 1000):
        assert "SCAN tweets" not in plan
        assert "USING INDEX ix_tweets_author_id_id" in plan
        assert "USING PRIMARY KEY" in plan or "USING COVERING INDEX" in plan  # the follows of user 1


def test_profile_reads_one_index_range(plans):
    for plan in plans(queries.tweets_by, 1) + plans(queries.tweets_by, 1, 1000):
        assert "SCAN tweets" not in plan
        assert "USING INDEX ix_tweets_author_id_id" in plan
        assert "TEMP B-TREE" not in plan, "the index gives the order: nothing to sort"


def test_users_page_walks_the_primary_key_in_order(plans):
    (plan,) = plans(queries.users_page, 3)
    assert "tweets" not in plan
    assert "TEMP B-TREE" not in plan, "the primary key gives the order: nothing to sort"


def test_following_and_user_lookups_use_keys(plans):
    for plan in (
        plans(queries.following_of, 1) + plans(queries.user_named, "Alice") + plans(queries.session_of, 1, "0" * 40)
    ):
        assert "SCAN" not in plan


def test_profile_counts_are_index_ranges_without_scanning_a_table(plans):
    (plan,) = plans(queries.profile_of, 1, 2)
    assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", "")
    assert "USING COVERING INDEX ix_tweets_author_id_id" in plan  # tweets counted in the index alone
    assert "ix_follows_followed_id_follower_id" in plan  # followers


def test_followers_and_following_pages_are_ranges_of_the_follows_keys(plans):
    for read in (queries.followers_of, queries.followed_by):
        for plan in plans(read, 1) + plans(read, 1, 40):
            assert "SCAN" not in plan, plan
            assert "TEMP B-TREE" not in plan, "the key gives the order: nothing to sort"


def test_finding_someone_is_a_range_of_the_lower_case_name_index(plans):
    for plan in plans(queries.users_named_from, "User") + plans(queries.users_named_from, "us", "user1"):
        assert "SCAN" not in plan, plan
        assert "USING INDEX uq_users_name_lower" in plan
        assert "TEMP B-TREE" not in plan, "the index gives the order: nothing to sort"


def test_before_the_index_migration_the_timeline_scans_tweets(make_app, plans):
    """At revision 0002, before the timeline indexes, the check above can fail, and does.

    (make_app builds on the same database file as the `plans` fixture's app.)
    """
    from flask_migrate import downgrade

    app = make_app()
    with app.app_context():
        downgrade(revision="0002")
    assert any("SCAN tweets" in plan for plan in plans(queries.timeline_of, 1))


def test_flask_explain_shows_the_scan_before_the_index_migration_and_the_index_after(make_app):
    from flask_migrate import downgrade

    app = make_app()
    runner = app.test_cli_runner()
    assert runner.invoke(args=["seed", "--users", "50", "--tweets", "2000", "--follows", "5"]).exit_code == 0
    at_head = runner.invoke(args=["explain", "--user", "3"])
    assert at_head.exit_code == 0, at_head.output
    assert "schema at 0005" in at_head.output
    assert "a timeline's first page: timeline_of(3,), 1 statement(s)" in at_head.output
    assert "USING INDEX ix_tweets_author_id_id" in at_head.output and "SCAN tweets" not in at_head.output
    with app.app_context():
        downgrade(revision="0002")
    # A process of its own, as `make explain` is: a connection keeps the plans it made at head.
    settings = ("DATABASE_URL", "INSTANCE_PATH", "SECRET_KEY", "BCRYPT_LOG_ROUNDS", "TESTING")
    before = (
        create_app({name: app.config[name] for name in settings})
        .test_cli_runner()
        .invoke(args=["explain", "--user", "3"])
    )
    assert "schema at 0002" in before.output and "SCAN tweets" in before.output
