"""Every stage, started for real (dev server, or nginx + uWSGI), serves the URL
contract, and stays correct with concurrent writers and readers: no 5xx, every
acknowledged tweet stored exactly once, and read-your-writes across processes."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tools import stages
from live_server import free_port

pytestmark = pytest.mark.integration

STAGE_NUMBERS = [stage.number for stage in stages.all_stages()]
USERS, PASSWORD = 40, "tweepy123"
TOKEN = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


@pytest.fixture(scope="module", params=STAGE_NUMBERS, ids=lambda n: f"stage{n}")
def served(request, tmp_path_factory):
    """A stage on a free port, on its own seeded database and var folder."""
    stage = stages.get_stage(request.param)
    folder = tmp_path_factory.mktemp(f"stage{stage.number}")
    database = folder / "tweepy.sqlite3"
    env = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{database}",
        "TWEEPY_INSTANCE_PATH": str(folder / "instance"),
        # Only to keep the suite quick; the cost itself is a setting like any other.
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
    }
    seed = ["--users", str(USERS), "--tweets", "400", "--follows", "5"]
    with stages.start(stage, port=free_port(), var=folder / "var", env=env, seed=seed) as running:
        running.database = database
        yield running


class Visitor:
    """One person with a browser: keeps cookies and takes CSRF tokens from the pages."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        self.token = None

    def get(self, path: str) -> requests.Response:
        response = self.http.get(self.base + path, allow_redirects=False, timeout=30)
        found = TOKEN.search(response.text)
        if found:
            self.token = found.group(1)
        return response

    def post(self, path: str, data: dict | None = None, token: bool = True) -> requests.Response:
        fields = dict(data or {})
        if token:
            fields["csrf_token"] = self.token
        return self.http.post(self.base + path, data=fields, allow_redirects=False, timeout=30)

    def login(self, name: str, password: str = PASSWORD) -> requests.Response:
        self.get("/")
        return self.post("/", {"name": name, "password": password})


def logged_in(running, name: str) -> Visitor:
    visitor = Visitor(running.url)
    assert visitor.login(name).status_code == 303
    return visitor


def stored_tweets(running, texts) -> dict[str, int]:
    with sqlite3.connect(running.database) as db:
        marks = ",".join("?" * len(texts))
        rows = db.execute(f"SELECT text, count(*) FROM tweets WHERE text IN ({marks}) GROUP BY text", list(texts))
        return dict(rows.fetchall())


# --- the contract, over real HTTP -------------------------------------------------


def test_stage_answers_health_and_serves_login_page(served):
    visitor = Visitor(served.url)
    assert visitor.get("/healthz").text == "ok\n"
    page = visitor.get("/")
    assert page.status_code == 200 and 'name="password"' in page.text


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
    made = visitor.post("/register/", {"name": name, "email": f"{name}@example.com", "password": "long enough", "confirm": "long enough"})
    assert made.status_code == 303
    visitor.get("/tweets/")
    assert visitor.post("/tweets/", {"tweet": "<script>alert(1)</script>"}).status_code == 303
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in visitor.get("/tweets/").text
    assert visitor.post("/users/user2/follow").status_code == 303
    assert "Unfollow" in visitor.get("/users/user2/").text


def test_bad_requests_get_clear_4xx(served):
    visitor = logged_in(served, "user3")
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
    owner, other = logged_in(served, "user4"), logged_in(served, "user5")
    owner.get("/tweets/")
    owner.post("/tweets/", {"tweet": "mine, not yours"})
    tweet_id = re.search(r'id="tweet-(\d+)"', owner.get("/users/user4/").text).group(1)
    other.get("/tweets/")
    assert other.post(f"/tweets/{tweet_id}/delete").status_code == 403
    assert owner.post(f"/tweets/{tweet_id}/delete").status_code == 303
    assert owner.post(f"/tweets/{tweet_id}/delete").status_code == 404


# --- correctness under concurrency ------------------------------------------------

WRITERS, POSTS_EACH, READERS, TIME_LIMIT = 6, 8, 4, 90


def test_concurrent_writers_and_readers_lose_nothing_and_read_their_writes(served):
    """Writers post and follow while readers read; every step is checked as it happens."""
    run = uuid.uuid4().hex[:6]
    deadline = time.monotonic() + TIME_LIMIT
    errors: list[str] = []
    acknowledged: list[str] = []
    lock = threading.Lock()

    def fail(message: str) -> None:
        with lock:
            errors.append(message)

    def writer(k: int) -> None:
        name = f"user{10 + k}"
        me = logged_in(served, name)
        me.get("/tweets/")
        for i in range(POSTS_EACH):
            if time.monotonic() > deadline:
                return fail(f"{name}: out of time")
            text = f"{run} {name} tweet {i}"
            posted = me.post("/tweets/", {"tweet": text})
            if posted.status_code != 303:
                return fail(f"{name}: posting answered {posted.status_code}")
            with lock:
                acknowledged.append(text)
            # Read-your-writes: the very next page shows it, whichever process serves it.
            if text not in me.get("/tweets/").text:
                fail(f"{name}: own tweet {i} missing from the next timeline")
        other = f"user{30 + k}"
        followed = me.post(f"/users/{other}/follow")
        if followed.status_code != 303 or "Unfollow" not in me.get(f"/users/{other}/").text:
            fail(f"{name}: follow of {other} not visible at once ({followed.status_code})")
        unfollowed = me.post(f"/users/{other}/unfollow")
        if unfollowed.status_code != 303 or "Unfollow" in me.get(f"/users/{other}/").text:
            fail(f"{name}: unfollow of {other} not visible at once ({unfollowed.status_code})")

    def reader(k: int) -> None:
        me = logged_in(served, f"user{20 + k}")
        while time.monotonic() < deadline and len(acknowledged) < WRITERS * POSTS_EACH:
            for path in ("/tweets/", "/users/", f"/users/user{10 + k}/"):
                status = me.get(path).status_code
                if status != 200:
                    return fail(f"reader {k}: {path} answered {status}")

    with ThreadPoolExecutor(WRITERS + READERS) as pool:
        futures = [pool.submit(writer, k) for k in range(WRITERS)] + [pool.submit(reader, k) for k in range(READERS)]
        for future in futures:
            future.result(timeout=TIME_LIMIT + 30)

    assert errors == []
    assert len(acknowledged) == WRITERS * POSTS_EACH
    counts = stored_tweets(served, acknowledged)
    assert counts == {text: 1 for text in acknowledged}, "every acknowledged tweet is stored exactly once"


def test_follower_sees_new_tweet_within_staleness_bound(served):
    """Someone else's tweet reaches a follower's timeline within the cache's sync interval."""
    follower, author = logged_in(served, "user36"), logged_in(served, "user37")
    follower.get("/tweets/")
    follower.post("/users/user37/follow")
    for _ in range(3):  # warm every process's cache with the old timeline
        follower.get("/tweets/")
    author.get("/tweets/")
    text = f"fresh news {uuid.uuid4().hex[:8]}"
    assert author.post("/tweets/", {"tweet": text}).status_code == 303
    bound = float(served.stage.get("CACHE_SYNC_INTERVAL")) + 0.5
    time.sleep(bound)
    for _ in range(served.stage.processes * 2):  # whichever process answers
        assert text in follower.get("/tweets/").text
