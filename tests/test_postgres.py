"""tweepy on PostgreSQL (psycopg 3): the migrations, the whole app, seeding, and
waiting for the server without stopping other greenlets under gevent.

Each test gets a database of its own, made fresh and dropped afterwards (see
``postgres.py``); without a PostgreSQL server they are skipped, or fail when
``TWEEPY_REQUIRE_SERVICES=1`` (see ``services.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest
from flask_migrate import downgrade, upgrade
from helpers.browser import Browser, sign_up
from helpers.pages import csrf_token, errors, profile_counts, text_of, tweet_ids, tweet_texts, user_names
from helpers.postgres import fresh_database
from helpers.services import libpq_url
from helpers.stored import FAST_BCRYPT, count, follows, tweets_by, user_id
from sqlalchemy import event, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from tweepy import create_app
from tweepy.extensions import db
from tweepy.models import Follow, Tweet, User
from tweepy.paging import LARGEST_ID

TABLES_AT_0001 = {"users", "tweets", "follows", "cache_invalidations", "alembic_version"}
TABLES = TABLES_AT_0001 | {"throttle_events"}
NAME_INDEX = ("uq_users_name_lower", "users")  # names unique whatever their case
TIMELINE_INDEXES = {
    ("ix_tweets_author_id_id", "tweets"),  # profiles and timelines, newest first
    ("ix_follows_followed_id_follower_id", "follows"),  # who follows X
}
THROTTLE_INDEX = ("ix_throttle_events_kind_subject_at", "throttle_events")
PREFIX_INDEX = ("ix_users_name_lower_c", "users")  # finding someone by a prefix of their name


@pytest.fixture
def postgres_database():
    with fresh_database() as url:
        yield url


@pytest.fixture
def make_pg_app(postgres_database):
    """Build an app on this test's PostgreSQL database, migrated, with a low bcrypt cost."""
    apps = []

    def build(migrate=True, **overrides):
        settings = {
            "DATABASE_URL": postgres_database,
            "SECRET_KEY": "test-secret",
            "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
            "TESTING": True,
            **overrides,
        }
        app = create_app(settings)
        apps.append(app)
        if migrate:
            with app.app_context():
                upgrade()
        return app

    yield build
    for app in apps:
        with app.app_context():
            db.engine.dispose()


@pytest.fixture(params=["none", "local"], ids=["CACHE=none", "CACHE=local"])
def pg_app(request, make_pg_app):
    return make_pg_app(CACHE=request.param)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_app(request, make_app):
    """The app on either database: for the rules both must keep alike."""
    if request.param == "sqlite":
        return make_app()
    return request.getfixturevalue("make_pg_app")()


# --- the migrations -----------------------------------------------------------


def schema(app) -> tuple[set[str], set[tuple[str, str]]]:
    """The tables and (index, table) pairs of the public schema, primary keys and unique constraints left out."""
    with app.app_context():
        tables = set(db.session.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")))
        indexes = db.session.execute(
            text(
                "SELECT indexname, tablename FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT IN "
                "(SELECT conname FROM pg_constraint WHERE contype IN ('p', 'u'))"
            )
        )
        return tables, {tuple(row) for row in indexes}


def test_migrations_build_undo_and_rebuild_the_schema_on_postgresql(make_pg_app):
    app = make_pg_app(migrate=False)
    assert schema(app) == (set(), set())

    with app.app_context():
        upgrade()
    assert schema(app) == (TABLES, {NAME_INDEX, THROTTLE_INDEX, PREFIX_INDEX} | TIMELINE_INDEXES)

    with app.app_context():
        downgrade(revision="0003")
    assert schema(app) == (TABLES, {NAME_INDEX, THROTTLE_INDEX} | TIMELINE_INDEXES)

    with app.app_context():
        downgrade(revision="0002")
    assert schema(app) == (TABLES, {NAME_INDEX, THROTTLE_INDEX})

    with app.app_context():
        downgrade(revision="0001")
    assert schema(app) == (TABLES_AT_0001, {NAME_INDEX})

    with app.app_context():
        downgrade(revision="base")
    assert schema(app) == ({"alembic_version"}, set())

    with app.app_context():
        upgrade()
    assert schema(app) == (TABLES, {NAME_INDEX, THROTTLE_INDEX, PREFIX_INDEX} | TIMELINE_INDEXES)


def test_migrated_postgresql_schema_matches_the_models(make_pg_app):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    app = make_pg_app()
    with app.app_context(), db.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), db.metadata)
    # Alembic reflects the prefix index without its collation, and so sees another index: the test below checks it.
    assert [(change, index.name) for change, index in differences] in (
        [],
        [
            ("remove_index", PREFIX_INDEX[0]),
            ("add_index", PREFIX_INDEX[0]),
        ],
    )


def test_prefix_index_is_on_lower_name_in_the_c_collation(make_pg_app):
    app = make_pg_app()
    with app.app_context():
        definition = db.session.scalar(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_users_name_lower_c'")
        )
    assert definition.endswith('(lower((name)::text) COLLATE "C")'), definition


def test_name_index_is_on_lower_name_and_unique(make_pg_app):
    app = make_pg_app()
    with app.app_context():
        definition = db.session.scalar(text("SELECT indexdef FROM pg_indexes WHERE indexname = 'uq_users_name_lower'"))
    assert definition.startswith("CREATE UNIQUE INDEX") and "lower((name)::text)" in definition


# --- the app ------------------------------------------------------------------


def test_a_new_user_posts_and_reads_their_timeline_on_postgresql(pg_app):
    alice = sign_up(pg_app, "alice")
    assert alice.post("/tweets/", {"tweet": "hello from postgres"}).status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["hello from postgres"]
    assert tweets_by(pg_app, "alice") == ["hello from postgres"]


def test_a_registered_user_logs_out_and_in_again(pg_app):
    alice = sign_up(pg_app, "alice")
    assert alice.logout().status_code == 303
    assert alice.get("/tweets/").status_code == 302
    assert alice.login("alice", "wrong password").status_code == 401
    assert alice.login("alice").status_code == 303
    assert "@alice" in text_of(alice.get("/tweets/"))


def test_following_shows_their_tweets_and_unfollowing_hides_them(pg_app):
    alice, bob = sign_up(pg_app, "alice"), sign_up(pg_app, "bob")
    bob.post("/tweets/", {"tweet": "bob was here"})

    assert alice.post("/users/bob/follow").status_code == 303
    assert follows(pg_app) == {("alice", "bob")}
    assert tweet_texts(alice.get("/tweets/")) == ["bob was here"]

    assert alice.post("/users/bob/unfollow").status_code == 303
    assert follows(pg_app) == set()
    assert tweet_texts(alice.get("/tweets/")) == []


def test_profile_counts_lists_and_search_work_on_postgresql(pg_app):
    alice, bob = sign_up(pg_app, "alice"), sign_up(pg_app, "bob")
    sign_up(pg_app, "al_x"), sign_up(pg_app, "Alfred")
    bob.post("/tweets/", {"tweet": "hi @alice"})
    bob.post("/users/alice/follow")
    alice.post("/users/bob/follow")
    bob_page = alice.get("/users/bob/")
    assert profile_counts(bob_page) == {"tweets": 1, "followers": 1, "following": 1}
    assert "Follows you" in text_of(bob_page)
    assert '<a class="mention" href="/users/alice/">@alice</a>' in text_of(bob_page)
    assert user_names(alice.get("/users/bob/followers/")) == ["alice"]
    assert user_names(alice.get("/users/bob/following/")) == ["alice"]
    # In code point order, as on SQLite: "_" (95) sorts before "f" (102), whatever the database's collation.
    assert user_names(alice.get("/users/?q=AL")) == ["al_x", "Alfred", "alice"]
    assert user_names(alice.get("/users/?q=al_")) == ["al_x"]
    assert alice.get("/users/", query_string={"q": "\x00"}).status_code == 200


def test_finding_someone_on_postgresql_reads_the_c_collation_index(make_pg_app):
    from tweepy import queries
    from tweepy.cli import query_plans

    app = make_pg_app()
    with app.test_request_context():
        db.session.execute(text("SET enable_seqscan = off"))  # an empty table is otherwise read whole
        (statement,) = query_plans(queries.users_named_from, "al")
    assert "ix_users_name_lower_c" in statement.plan, statement.plan


def test_profile_and_users_pages_list_what_is_stored(pg_app):
    alice = sign_up(pg_app, "alice")
    sign_up(pg_app, "bob")
    alice.post("/tweets/", {"tweet": "first"})
    alice.post("/tweets/", {"tweet": "second"})

    assert tweet_texts(alice.get("/users/alice/")) == ["second", "first"]
    assert tweet_texts(alice.get("/users/ALICE/")) == ["second", "first"]  # names are looked up whatever their case
    assert user_names(alice.get("/users/")) == ["alice", "bob"]
    assert alice.get("/users/nobody/").status_code == 404


def test_paging_and_deleting_accept_the_largest_64_bit_id(pg_app):
    alice = sign_up(pg_app, "alice")
    alice.post("/tweets/", {"tweet": "still here"})
    assert tweet_texts(alice.get(f"/tweets/?before={LARGEST_ID}")) == ["still here"]
    assert tweet_texts(alice.get(f"/users/alice/?before={LARGEST_ID}")) == ["still here"]
    assert alice.post(f"/tweets/{LARGEST_ID}/delete").status_code == 404


def test_deleting_a_tweet_removes_it_from_pages_and_database(pg_app):
    alice = sign_up(pg_app, "alice")
    alice.post("/tweets/", {"tweet": "keep me"})
    alice.post("/tweets/", {"tweet": "delete me"})
    newest = tweet_ids(alice.get("/tweets/"))[0]

    assert alice.post(f"/tweets/{newest}/delete").status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["keep me"]
    assert tweets_by(pg_app, "alice") == ["keep me"]


def test_someone_elses_tweet_cannot_be_deleted(pg_app):
    alice, bob = sign_up(pg_app, "alice"), sign_up(pg_app, "bob")
    bob.post("/tweets/", {"tweet": "mine"})
    (bobs,) = tweet_ids(bob.get("/tweets/"))
    assert alice.post(f"/tweets/{bobs}/delete").status_code == 403
    assert tweets_by(pg_app, "bob") == ["mine"]


def test_a_name_differing_only_in_case_is_refused(pg_app):
    sign_up(pg_app, "alice")
    response = Browser(pg_app.test_client()).register("ALICE", email="another@example.com")
    assert response.status_code == 400
    assert "That name is taken." in errors(response)
    assert count(pg_app, User) == 1


def test_the_database_refuses_a_name_differing_only_in_case(make_pg_app):
    """The unique index holds even when two registrations pass the form's check at once."""
    from sqlalchemy.exc import IntegrityError

    app = make_pg_app()
    with app.app_context():
        db.session.add(User(name="alice", email="a@example.com", password_hash="x"))
        db.session.commit()
        db.session.add(User(name="Alice", email="b@example.com", password_hash="x"))
        with pytest.raises(IntegrityError):
            db.session.commit()
        db.session.rollback()


# --- input PostgreSQL refuses: the NUL character -------------------------------

NUL = "\x00"
NUL_ERROR = "The NUL character (\\0) is not allowed."


def registration_with(field: str, value: str) -> dict:
    fields = {"name": "carol", "email": "carol@example.com", "password": "long enough", "confirm": "long enough"}
    fields[field] = value
    if field == "password":
        fields["confirm"] = value
    return fields


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", f"car{NUL}ol"), ("email", f"carol{NUL}@example.com"), ("password", f"long{NUL}enough")],
)
def test_registration_with_a_nul_character_is_a_400_saying_so_and_stores_nothing(any_app, field, value):
    browser = Browser(any_app.test_client())
    response = browser.client.post(
        "/register/", data={**registration_with(field, value), "csrf_token": csrf_token(browser.get("/register/"))}
    )
    assert response.status_code == 400
    assert NUL_ERROR in errors(response)
    assert count(any_app, User) == 0


@pytest.mark.parametrize(("name", "password"), [(f"ali{NUL}ce", "correct horse"), ("alice", f"correct{NUL}horse")])
def test_login_with_a_nul_character_is_a_400_saying_so(any_app, name, password):
    sign_up(any_app, "alice").logout()
    response = Browser(any_app.test_client()).login(name, password)
    assert response.status_code == 400
    assert NUL_ERROR in errors(response)


@pytest.mark.parametrize("tweet", [f"hello{NUL}world", NUL])
def test_a_tweet_with_a_nul_character_is_a_400_saying_so_and_stores_nothing(any_app, tweet):
    alice = sign_up(any_app, "alice")
    response = alice.post("/tweets/", {"tweet": tweet})
    assert response.status_code == 400
    assert NUL_ERROR in errors(response)
    assert count(any_app, Tweet) == 0


def test_a_profile_url_with_a_nul_character_is_a_404(any_app):
    alice = sign_up(any_app, "alice")
    assert alice.get("/users/ali%00ce/").status_code == 404
    assert alice.post("/users/ali%00ce/follow").status_code == 404
    assert count(any_app, Follow) == 0


# --- seeding ------------------------------------------------------------------


def seed(app, users=30, tweets=500, follows_each=4):
    with app.app_context():
        result = app.test_cli_runner().invoke(
            args=["seed", "--users", str(users), "--tweets", str(tweets), "--follows", str(follows_each)]
        )
    assert result.exit_code == 0, result.output


def seeded_rows(app) -> dict:
    with app.app_context():
        return {
            "users": db.session.execute(select(User.id, User.name, User.email).order_by(User.id)).all(),
            "tweets": db.session.execute(select(Tweet.id, Tweet.author_id, Tweet.text).order_by(Tweet.id)).all(),
            "follows": set(db.session.execute(select(Follow.follower_id, Follow.followed_id)).all()),
        }


def test_registering_after_seeding_postgresql_gets_the_next_id(make_pg_app):
    app = make_pg_app()
    seed(app, users=30)
    browser = Browser(app.test_client())
    assert browser.register("newcomer").status_code == 303
    assert user_id(app, "newcomer") == 31
    assert browser.post("/tweets/", {"tweet": "after the seed"}).status_code == 303
    assert tweet_texts(browser.get("/users/newcomer/")) == ["after the seed"]


def test_seeding_postgresql_gives_the_same_data_as_sqlite(make_pg_app, make_app):
    on_postgres, on_sqlite = make_pg_app(), make_app()
    seed(on_postgres)
    seed(on_sqlite)
    assert seeded_rows(on_postgres) == seeded_rows(on_sqlite)


def test_seeding_postgresql_leaves_the_planner_statistics_of_what_it_loaded(make_pg_app):
    """Autovacuum may be off or late; the first requests are planned on these counts, not on guesses."""
    app = make_pg_app(DB_READS_AUTOCOMMIT=True)
    seed(app, users=30, tweets=500, follows_each=4)
    with app.app_context():
        estimated = dict(
            db.session.execute(
                text("SELECT relname, reltuples FROM pg_class WHERE relname IN ('users', 'tweets', 'follows')")
            ).all()
        )
    assert estimated == {"users": 30, "tweets": 500, "follows": 120}


def test_seeded_users_log_in_on_postgresql(make_pg_app):
    app = make_pg_app()
    seed(app)
    browser = Browser(app.test_client())
    assert browser.login("user30", "tweepy123").status_code == 303
    assert len(tweet_texts(browser.get("/tweets/"))) == 50


# --- gevent -------------------------------------------------------------------

GREENLETS = 6
SLEEP_S = 0.3

# Run in a fresh interpreter, as uWSGI's gevent-early-monkey-patch does: gevent
# patches the standard library first, then the app (and psycopg) is imported.
CONCURRENT_SLEEPS = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()

    import json, sys, time

    import gevent
    import psycopg.waiting
    from sqlalchemy import text

    from tweepy import create_app
    from tweepy.extensions import db

    url, greenlets, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "x", "DB_POOL_SIZE": greenlets})

    def sleep_in_database():
        with app.app_context():
            db.session.execute(text("SELECT pg_sleep(:s)"), {"s": sleep_s})

    with app.app_context():
        db.session.execute(text("SELECT 1"))  # one connection made before the clock starts, as in a warm pool
    started = time.perf_counter()
    gevent.joinall([gevent.spawn(sleep_in_database) for _ in range(greenlets)], raise_error=True)
    print(json.dumps({"seconds": time.perf_counter() - started, "wait": psycopg.waiting.wait.__name__}))
    """
)


def concurrent_sleeps(database_url: str, **environment: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", CONCURRENT_SLEEPS, database_url, str(GREENLETS), str(SLEEP_S)],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


def test_psycopg_lets_other_greenlets_run_while_it_waits_under_gevent(postgres_database):
    """psycopg (3.1.14 and later) sees at import that gevent has patched ``select``
    and waits through it (``wait_poll``) instead of in C: no hook of ours is needed."""
    run = concurrent_sleeps(postgres_database)
    assert run["wait"] != "wait_c"
    assert run["seconds"] < GREENLETS * SLEEP_S / 2, f"{GREENLETS} sleeps of {SLEEP_S} s took {run['seconds']:.2f} s"


def test_psycopg_c_wait_would_serialize_the_greenlets(postgres_database):
    """Why the test above checks the wait function: the C one blocks the whole hub."""
    run = concurrent_sleeps(postgres_database, PSYCOPG_WAIT_FUNC="wait_c")
    assert run["wait"] == "wait_c"
    assert run["seconds"] >= GREENLETS * SLEEP_S * 0.9


def test_psycopg_imported_before_gevent_patches_keeps_the_blocking_wait():
    """psycopg chooses its wait function once, at import: gevent must patch first
    (uWSGI's gevent-early-monkey-patch, stages 5 and 6), or every query blocks the hub."""
    late_patch = (
        "import psycopg.waiting; from gevent import monkey; monkey.patch_all(); print(psycopg.waiting.wait.__name__)"
    )
    completed = subprocess.run([sys.executable, "-c", late_patch], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "wait_c", completed.stderr


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"DB_READS_AUTOCOMMIT": True},
        {"DB_READS_AUTOCOMMIT": True, "DB_ONE_STATEMENT_WRITES": True},
    ],
    ids=["reads in transactions", "reads autocommit", "a tweet in one statement"],
)
def test_writers_of_the_invalidation_log_commit_in_id_order_on_postgresql(make_pg_app, settings):
    """sync() reads the log by id: a later id must never commit before an earlier one, or a
    process that syncs in between skips the earlier key for good. Writers take turns, a write
    that is one statement too."""
    import threading

    from tweepy import queries, writes
    from tweepy.cache import forget

    app = make_pg_app(CACHE="local", **settings)
    with app.app_context():
        author = writes.register("alice", "alice@example.com", "not-a-real-hash")
    first_logged, let_first_commit = threading.Event(), threading.Event()
    second_done = threading.Event()

    def first() -> None:
        with app.app_context(), writes.transaction():
            forget(queries.newest_tweets_by.key(404))
            first_logged.set()
            let_first_commit.wait(10)

    def second() -> None:
        first_logged.wait(10)
        with app.app_context():
            writes.post_tweet(author.id, "later")
            second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert not second_done.wait(0.5), "the second writer committed while the first had not"
    let_first_commit.set()
    for thread in threads:
        thread.join(10)
    assert second_done.is_set(), "the second writer never committed after the first did"
    with app.app_context():
        assert logged_keys()[-2:] == ["newest_tweets_by:404", f"newest_tweets_by:{author.id}"]


def statements_sent(app) -> list[str]:
    """The first word of every statement the app sends PostgreSQL from now on, and COMMIT for each commit:
    each is a round trip, the cost a write pays beside SQLite's."""
    sent = []
    with app.app_context():
        engine = db.engine
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: sent.append(statement.split()[0]))
    event.listen(engine, "commit", lambda _connection: sent.append("COMMIT"))
    return sent


def logged_keys() -> list[str]:
    return db.session.scalars(text("SELECT key FROM cache_invalidations ORDER BY id")).all()


@pytest.mark.parametrize(
    ("settings", "sent_for_a_tweet"),
    [({}, ["BEGIN", "INSERT", "INSERT", "COMMIT"]), ({"DB_ONE_STATEMENT_WRITES": True}, ["WITH"])],
    ids=["in a transaction", "in one statement"],
)
def test_a_tweet_logs_its_key_and_takes_its_turn(make_pg_app, settings, sent_for_a_tweet):
    from tweepy import writes

    app = make_pg_app(CACHE="local", DB_READS_AUTOCOMMIT=True, **settings)
    with app.app_context():
        author = writes.register("alice", "alice@example.com", "not-a-real-hash")
        sent = statements_sent(app)
        writes.post_tweet(author.id, "hello")
        assert sent == sent_for_a_tweet  # the tweet, and the log under the writers' lock
        assert logged_keys()[-1] == f"newest_tweets_by:{author.id}"
        assert db.session.scalars(select(Tweet.text)).all() == ["hello"]


def test_in_one_statement_a_follow_or_unfollow_logs_its_key_only_when_it_changes_a_row(make_pg_app):
    from tweepy import writes

    app = make_pg_app(CACHE="local", DB_READS_AUTOCOMMIT=True, DB_ONE_STATEMENT_WRITES=True)
    with app.app_context():
        alice = writes.register("alice", "alice@example.com", "not-a-real-hash")
        bob = writes.register("bob", "bob@example.com", "not-a-real-hash")
        before = len(logged_keys())
        sent = statements_sent(app)
        for change in (writes.follow, writes.follow, writes.unfollow, writes.unfollow):
            change(alice.id, bob.id)
        assert sent == ["WITH"] * 4
        assert logged_keys()[before:] == [f"following:{alice.id}"] * 2  # the first follow, the first unfollow
        assert db.session.scalar(select(func.count()).select_from(Follow)) == 0


def test_a_change_in_one_statement_that_fails_writes_nothing_and_logs_nothing(make_pg_app):
    from tweepy import writes

    app = make_pg_app(CACHE="local", DB_READS_AUTOCOMMIT=True, DB_ONE_STATEMENT_WRITES=True)
    with app.app_context():
        before = logged_keys()
        with pytest.raises(IntegrityError):
            writes.post_tweet(404, "by nobody")  # no such author
        assert server_transaction_status() == "IDLE"
        assert logged_keys() == before
        assert db.session.scalar(select(func.count()).select_from(Tweet)) == 0


def test_a_registration_reads_nothing_back_once_committed(make_pg_app):
    from tweepy import writes

    app = make_pg_app(CACHE="local", DB_READS_AUTOCOMMIT=True)
    sent = statements_sent(app)
    with app.app_context():
        account = writes.register("alice", "alice@example.com", "not-a-real-hash")
    assert sent[-1] == "COMMIT", sent
    assert account.name == "alice" and account.id == user_id(app, "alice")


# --- reads in autocommit (DB_READS_AUTOCOMMIT) ------------------------------------------------


def server_transaction_status() -> str:
    return db.session.connection().connection.driver_connection.info.transaction_status.name


def test_with_reads_in_autocommit_a_read_leaves_no_transaction_open(make_pg_app):
    app = make_pg_app(DB_READS_AUTOCOMMIT=True)
    with app.app_context():
        db.session.execute(text("SELECT count(*) FROM users")).scalar()
        assert server_transaction_status() == "IDLE"
    with make_pg_app(migrate=False).app_context():
        db.session.execute(text("SELECT count(*) FROM users")).scalar()
        assert server_transaction_status() == "INTRANS", "without the setting a read opens a transaction"


def test_with_reads_in_autocommit_a_write_that_fails_halfway_stores_nothing(make_pg_app):
    from tweepy import writes

    app = make_pg_app(CACHE="local", DB_READS_AUTOCOMMIT=True)
    with app.app_context():
        account = writes.register("alice", "alice@example.com", "not-a-real-hash")
        with pytest.raises(RuntimeError), writes.transaction():
            db.session.execute(insert(Tweet).values(author_id=account.id, text="half"))
            assert server_transaction_status() == "INTRANS"
            raise RuntimeError("the write fails after its first statement")
        assert server_transaction_status() == "IDLE"
        assert db.session.scalar(select(func.count()).select_from(Tweet)) == 0
        writes.post_tweet(account.id, "whole")
        assert db.session.scalars(select(Tweet.text)).all() == ["whole"]


def test_with_reads_in_autocommit_migrations_and_seeding_still_run_in_transactions(make_pg_app, monkeypatch):
    from tweepy import cli

    app = make_pg_app(migrate=False, DB_READS_AUTOCOMMIT=True)
    with app.app_context():
        upgrade()
        assert {"users", "tweets", "follows", "cache_invalidations"} <= schema(app)[0]

    def fails(connection):
        raise RuntimeError("the seed fails after its rows are in")

    monkeypatch.setattr(cli, "_move_id_sequence_past_seeded_users", fails)
    with app.app_context():
        failed = app.test_cli_runner().invoke(args=["seed", "--users", "30", "--tweets", "200", "--follows", "3"])
        assert failed.exit_code != 0
        db.session.rollback()
        assert db.session.scalar(select(func.count()).select_from(User)) == 0, "half a seed was kept"
    monkeypatch.undo()
    seed(app, users=30, tweets=200, follows_each=3)
    assert len(seeded_rows(app)["tweets"]) == 200


# --- pooled connections the server ended ------------------------------------------------------


def pooled_backend(app) -> int:
    """The server process behind the app's one pooled connection, handed back to the pool."""
    with app.app_context():
        pid = db.session.execute(text("SELECT pg_backend_pid()")).scalar()
        db.session.remove()
    return pid


def test_a_pooled_connection_the_server_ended_is_replaced_without_an_error(make_pg_app, postgres_database):
    """A restart ends every connection; the next request gets a new one, not a 500."""
    app = make_pg_app(DB_POOL_SIZE=1, DB_READS_AUTOCOMMIT=True)
    ended = pooled_backend(app)
    with psycopg.connect(libpq_url(postgres_database), autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [ended]).fetchone()[0]
        deadline = time.monotonic() + 10
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [ended]).fetchone():
            assert time.monotonic() < deadline, "the terminated backend never went away"
            time.sleep(0.05)
    alice = sign_up(app, "alice")  # reads and writes on the pool's one connection
    assert alice.get("/tweets/").status_code == 200
    assert pooled_backend(app) != ended


def test_a_pooled_connection_is_checked_out_without_a_round_trip(make_pg_app, postgres_database):
    """Checking the socket, not pinging: the server sees no statement between the app's own."""
    app = make_pg_app(DB_POOL_SIZE=1, DB_READS_AUTOCOMMIT=True)
    backend = pooled_backend(app)
    with app.app_context():
        db.session.execute(text("SELECT 'the last statement'")).scalar()
        db.session.remove()
        db.session.connection()  # checked out again, as the next request would
        with psycopg.connect(libpq_url(postgres_database), autocommit=True) as other:
            seen = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [backend]).fetchone()
        db.session.remove()
    assert seen == ("SELECT 'the last statement'",)
