"""Every stage, started for real (dev server, or nginx + uWSGI), serves the URL
contract, and stays correct with concurrent writers and readers: no 5xx, every
acknowledged tweet stored exactly once, and read-your-writes across processes."""

from __future__ import annotations

import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import psycopg
import pytest
import requests
from helpers.http import Visitor, logged_in, worker_of
from helpers.postgres import fresh_database
from helpers.services import libpq_url, postgres_url
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from tools import stages
from tweepy.models import Tweet

pytestmark = pytest.mark.integration

STAGE_NUMBERS = [stage.number for stage in stages.all_stages()]
ON_POSTGRESQL = [s.number for s in stages.all_stages() if s.app_setting("DATABASE_URL").startswith("postgresql")]
USERS = 40
# Long enough that a test can warm every process and look before any of them syncs again.
SYNC_INTERVAL = 2.0


@pytest.fixture(scope="module", params=STAGE_NUMBERS, ids=lambda n: f"stage{n}")
def served(request, tmp_path_factory):
    """A stage on a free port, on its own seeded database (a fresh PostgreSQL one for a stage on PostgreSQL)."""
    stage = stages.get_stage(request.param)
    folder = tmp_path_factory.mktemp(f"stage{stage.number}")
    with ExitStack() as cleanup:
        if stage.number in ON_POSTGRESQL:
            # Reached as the stage's own role, which the runner makes the new database's owner.
            role = make_url(stage.app_setting("DATABASE_URL")).username
            fresh = cleanup.enter_context(fresh_database("stage"))
            database = make_url(fresh).set(username=role).render_as_string(hide_password=False)
        else:
            database = f"sqlite:///{folder / 'tweepy.sqlite3'}"
        yield cleanup.enter_context(start_for_tests(stage, folder, database))


@contextmanager
def start_for_tests(stage, folder, database: str, **settings: str):
    env = {
        "TWEEPY_DATABASE_URL": database,
        "TWEEPY_INSTANCE_PATH": str(folder / "instance"),
        # Only to keep the suite quick; the cost itself is a setting like any other.
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        # Every answer names its process, so the tests can tell which one served it.
        "TWEEPY_WORKER_HEADER": "true",
        "TWEEPY_CACHE_SYNC_INTERVAL": str(SYNC_INTERVAL),
        # A fresh database gets fresh keys in a shared Redis (stages caching there).
        "TWEEPY_CACHE_KEY_PREFIX": f"tweepy-test-{uuid.uuid4().hex[:8]}:",
        **settings,
    }
    seed = ["--users", str(USERS), "--tweets", "400", "--follows", "5"]
    with stages.start(stage, port=stages.free_port(), var=folder / "var", env=env, seed=seed) as running:
        running.database, running.instance = database, folder / "instance"
        yield running
        if hasattr(running, "engine"):
            running.engine.dispose()


def workers(running) -> int:
    return running.stage.nodes * running.stage.processes if running.stage.server == "uwsgi" else 1


def stored_tweets(running, texts) -> dict[str, int]:
    """How many times each text is stored, read straight from the stage's database."""
    if not hasattr(running, "engine"):
        running.engine = create_engine(running.database)
    query = select(Tweet.text, func.count()).where(Tweet.text.in_(list(texts))).group_by(Tweet.text)
    with running.engine.connect() as connection:
        return {text: n for text, n in connection.execute(query)}


# --- the contract, over real HTTP -------------------------------------------------


def test_stage_answers_health_and_serves_login_page(served):
    visitor = Visitor(served.url)
    assert visitor.get("/healthz").text == "ok\n"
    page = visitor.get("/")
    assert page.status_code == 200 and 'name="password"' in page.text


@pytest.mark.parametrize("served", ON_POSTGRESQL, indirect=True, ids=lambda n: f"stage{n}")
def test_a_stage_on_postgresql_is_served_by_a_role_of_its_own_never_the_superuser(served):
    for visitor in [logged_in(served.url, f"user{k}") for k in range(1, 4)]:
        assert visitor.get("/tweets/").status_code == 200
    name, role = make_url(served.database).database, make_url(served.database).username
    with psycopg.connect(libpq_url(postgres_url())) as admin:
        sessions = admin.execute(
            "SELECT a.usename, r.rolsuper FROM pg_stat_activity a JOIN pg_roles r ON r.rolname = a.usename"
            " WHERE a.datname = %s AND a.pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
        owner = admin.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (name,)).fetchone()
        password = admin.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()[0]
    assert role != "postgres" and sessions and set(sessions) == {(role, False)}
    assert owner == (role,)
    assert password.startswith("SCRAM-SHA-256$")
    # libpq's password file, readable by its owner only; the password is in no URL.
    [entry] = (served.instance / "pgpass").read_text().splitlines()
    assert (served.instance / "pgpass").stat().st_mode & 0o777 == 0o600
    assert entry.split(":")[3] == role and entry.split(":")[4] not in served.database


def test_stage_serves_static_files(served):
    response = requests.get(served.url + "static/style.css", timeout=10)
    assert response.status_code == 200 and "--accent" in response.text


def test_login_then_timeline_and_logout(served):
    visitor = Visitor(served.url)
    assert visitor.login("user1", "wrong password").status_code == 401
    assert visitor.get("/tweets/").status_code == 302
    assert visitor.login("user1").headers["Location"].endswith("/tweets/")
    timeline = visitor.get("/tweets/")
    assert timeline.status_code == 200 and "@user1" in timeline.text
    assert visitor.post("/logout/").status_code == 303
    assert visitor.get("/tweets/").status_code == 302


def test_register_post_follow_and_see_it(served):
    name = "reg_" + uuid.uuid4().hex[:8]
    visitor = Visitor(served.url)
    visitor.get("/register/")
    made = visitor.post(
        "/register/",
        {"name": name, "email": f"{name}@example.com", "password": "long enough", "confirm": "long enough"},
    )
    assert made.status_code == 303
    visitor.get("/tweets/")
    assert visitor.post("/tweets/", {"tweet": "<script>alert(1)</script>"}).status_code == 303
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in visitor.get("/tweets/").text
    assert visitor.post("/users/user2/follow").status_code == 303
    assert "Unfollow" in visitor.get("/users/user2/").text


PARTS = [part for stage in stages.all_stages() for part in stage.parts()]


@pytest.mark.parametrize("part", PARTS, ids=lambda part: part.slug)
def test_every_part_of_a_step_serves_as_its_settings_say(part, tmp_path):
    with start_for_tests(part, tmp_path, f"sqlite:///{tmp_path / 'tweepy.sqlite3'}") as running:
        uwsgi = running.process("uwsgi").args
        assert ("--gevent" in uwsgi) == bool(int(part.get("GEVENT")))
        visitor = logged_in(running.url, "user1")
        visitor.get("/tweets/")  # the new session's token
        text = "posted at " + uuid.uuid4().hex[:8]
        assert visitor.post("/tweets/", {"tweet": text}).status_code == 303
        timeline = visitor.get("/tweets/")
        assert timeline.status_code == 200 and text in timeline.text
        assert text in visitor.get("/tweets/").text, "read again, from whatever the part keeps"
        assert visitor.post("/logout/").status_code == 303
        assert visitor.login("user1", "wrong password").status_code == 401


def test_bad_requests_get_clear_4xx(served):
    visitor = logged_in(served.url, "user3")
    assert visitor.post("/tweets/", {"tweet": "no token"}, token=False).status_code == 400
    assert visitor.post("/tweets/", {"tweet": "   "}).status_code == 400
    assert visitor.post("/tweets/", {"tweet": "x" * 281}).status_code == 400
    assert visitor.get("/tweets/?before=abc").status_code == 400
    assert visitor.post("/users/user3/follow").status_code == 400
    assert visitor.post("/users/nobody_here/follow").status_code == 404
    assert visitor.get("/no/such/page").status_code == 404
    assert visitor.http.delete(served.url + "tweets/", timeout=10).status_code == 405
    big = visitor.http.post(served.url + "tweets/", data={"tweet": "x" * (1024 * 1024 + 1)}, timeout=30)
    assert big.status_code == 413


def test_deleting_someone_elses_tweet_is_forbidden(served):
    owner, other = logged_in(served.url, "user4"), logged_in(served.url, "user5")
    owner.get("/tweets/")
    owner.post("/tweets/", {"tweet": "mine, not yours"})
    tweet_id = re.search(r'id="tweet-(\d+)"', owner.get("/users/user4/").text).group(1)
    other.get("/tweets/")
    assert other.post(f"/tweets/{tweet_id}/delete").status_code == 403
    assert owner.post(f"/tweets/{tweet_id}/delete").status_code == 303
    assert owner.post(f"/tweets/{tweet_id}/delete").status_code == 404


# --- correctness under concurrency ------------------------------------------------

WRITERS, POSTS_EACH, READERS, TIME_LIMIT = 6, 8, 4, 90


class Workload:
    """Writers who post, follow and unfollow, each checking they read their own writes,
    while readers read; every failure is written down as it happens."""

    def __init__(self, running) -> None:
        self.running = running
        self.run = uuid.uuid4().hex[:6]
        self.deadline = time.monotonic() + TIME_LIMIT
        self.errors: list[str] = []
        self.acknowledged: list[str] = []
        self.read_elsewhere = 0  # own writes read back from a process other than the writer's
        self.lock = threading.Lock()

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)

    def reads_own_write(self, me: Visitor, wrote: requests.Response, path: str, shows) -> bool:
        """Read ``path`` until a process other than the writer's answers (a few tries); every read must show it."""
        for _ in range(workers(self.running) * 3):
            page = me.get(path)
            if not shows(page.text):
                return False
            if worker_of(page) != worker_of(wrote):
                with self.lock:
                    self.read_elsewhere += 1
                break
        return True

    def writer(self, k: int) -> None:
        name = f"user{10 + k}"
        me = logged_in(self.running.url, name)
        me.get("/tweets/")
        for i in range(POSTS_EACH):
            if time.monotonic() > self.deadline:
                return self.fail(f"{name}: out of time")
            text = f"{self.run} {name} tweet {i}"
            posted = me.post("/tweets/", {"tweet": text})
            if posted.status_code != 303:
                return self.fail(f"{name}: posting answered {posted.status_code}")
            with self.lock:
                self.acknowledged.append(text)
            if not self.reads_own_write(me, posted, "/tweets/", lambda page, text=text: text in page):
                self.fail(f"{name}: own tweet {i} missing from a timeline read after it")
        other = f"user{30 + k}"
        for verb, shows in (("follow", lambda p: "Unfollow" in p), ("unfollow", lambda p: "Unfollow" not in p)):
            done = me.post(f"/users/{other}/{verb}")
            if done.status_code != 303 or not self.reads_own_write(me, done, f"/users/{other}/", shows):
                self.fail(f"{name}: {verb} of {other} not visible at once ({done.status_code})")

    def reader(self, k: int) -> None:
        me = logged_in(self.running.url, f"user{20 + k}")
        while time.monotonic() < self.deadline and len(self.acknowledged) < WRITERS * POSTS_EACH:
            for path in ("/tweets/", "/users/", f"/users/user{10 + k}/"):
                status = me.get(path).status_code
                if status != 200:
                    return self.fail(f"reader {k}: {path} answered {status}")


def test_concurrent_writers_and_readers_lose_nothing_and_read_their_writes(served):
    """Writers post and follow while readers read; every step is checked as it happens,
    and own writes are read back from other processes too."""
    work = Workload(served)
    with ThreadPoolExecutor(WRITERS + READERS) as pool:
        futures = [pool.submit(work.writer, k) for k in range(WRITERS)]
        futures += [pool.submit(work.reader, k) for k in range(READERS)]
        for future in futures:
            future.result(timeout=TIME_LIMIT + 30)

    assert work.errors == []
    assert len(work.acknowledged) == WRITERS * POSTS_EACH
    counts = stored_tweets(served, work.acknowledged)
    assert counts == {text: 1 for text in work.acknowledged}, "every acknowledged tweet is stored exactly once"
    if workers(served) > 1:
        assert work.read_elsewhere > 0, "no write was read back from another process: read-your-writes went untested"


def warm_every_process(visitor: Visitor, path: str, processes: int) -> set[str]:
    """Read ``path`` until every process has served it twice (the second time from its cache)."""
    served_by: dict[str, int] = {}
    deadline = time.monotonic() + SYNC_INTERVAL / 2
    while time.monotonic() < deadline and (len(served_by) < processes or min(served_by.values()) < 2):
        worker = worker_of(visitor.get(path))
        served_by[worker] = served_by.get(worker, 0) + 1
    return set(served_by)


def test_follower_sees_new_tweet_from_every_process_at_its_next_request_or_within_the_bound(served):
    """With no cache, one shared by every process (Redis), or per-process caches told of every
    write by the write signal, no process shows the old timeline once the write has returned. With
    a near cache in front of Redis (CACHE_NEAR), the stage promises the bound instead: processes that
    did not serve the write show the old timeline until their next sync, and never after it."""
    check_what_followers_see_after_a_tweet(served, stale_until_sync=served.stage.app_value("CACHE_NEAR"))


@pytest.fixture(scope="module")
def stage4_without_write_signal(tmp_path_factory):
    stage, folder = stages.get_stage(4), tmp_path_factory.mktemp("stage4-no-signal")
    database = f"sqlite:///{folder / 'tweepy.sqlite3'}"
    with start_for_tests(stage, folder, database, TWEEPY_CACHE_WRITE_SIGNAL="false") as running:
        yield running


def test_without_the_write_signal_other_processes_show_the_old_page_until_their_next_sync(
    stage4_without_write_signal,
):
    """Per-process caches that only replay the log every CACHE_SYNC_INTERVAL: a process that did
    not serve the write keeps showing the old timeline until its next sync (the test sees that
    stale page, so the bound is real, not vacuous), then never again once the bound has passed."""
    check_what_followers_see_after_a_tweet(stage4_without_write_signal, stale_until_sync=True)


def check_what_followers_see_after_a_tweet(served, stale_until_sync: bool) -> None:
    follower, author = logged_in(served.url, "user36"), logged_in(served.url, "user37")
    follower.get("/tweets/")
    follower.post("/users/user37/follow")
    time.sleep(SYNC_INTERVAL)  # every process syncs at its next request, all within the warm-up
    warmed = warm_every_process(follower, "/tweets/", workers(served))
    assert len(warmed) == workers(served), f"only {len(warmed)} of {workers(served)} processes answered"

    author.get("/tweets/")
    text = f"fresh news {uuid.uuid4().hex[:8]}"
    posted = author.post("/tweets/", {"tweet": text})
    assert posted.status_code == 303
    written_at = time.monotonic()

    stale_pages = elsewhere = 0
    while time.monotonic() - written_at < SYNC_INTERVAL / 4:
        page = follower.get("/tweets/")
        if worker_of(page) != worker_of(posted):
            elsewhere += 1
            stale_pages += text not in page.text
    if workers(served) > 1:
        assert elsewhere > 0, "no other process answered: what other processes show went untested"
    if stale_until_sync:
        assert stale_pages > 0, "no process served the old timeline: the staleness bound went untested"
    else:
        assert stale_pages == 0, f"{stale_pages} pages from other processes still showed the old timeline"

    time.sleep(max(0.0, written_at + SYNC_INTERVAL + 0.2 - time.monotonic()))
    for _ in range(workers(served) * 4):
        page = follower.get("/tweets/")
        assert text in page.text, f"{worker_of(page)} still served the old timeline after the bound"
