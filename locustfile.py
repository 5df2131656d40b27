"""The tweepy benchmark protocol: the same realistic traffic and the same pass/fail bar for every stage.

A closed loop of Locust ``FastHttpUser``s, thinking 0.5-1.5 s between tasks, each logged in as a
seeded ``user<k>`` of its own (password ``tweepy123``), and back to it at every log in, even after
registering another. Forms are filled as a browser fills them (the CSRF token of the last page);
redirects are never followed, so one locust request is one server request, and each status is
checked: anything else fails with a short, stable message. A login refused as busy is tried again
after its Retry-After. The tasks, their weights, the bar and every setting are in ``tools/protocol.py``.

How many users were seeded is asked of the server when a test starts, unless TWEEPY_SEED_USERS
says. When locust quits, one line says ``BAR MET: ...`` or ``BAR MISSED: ...`` and a missed bar
exits with 1; with ``--processes N`` or remote workers only the master judges. Pass the server with
-H (default http://127.0.0.1:5000) and run it from the repository's root, which locust puts on
``sys.path`` so that ``tools.protocol`` imports; stages/1-protocol/README.md says why it is so.
"""

from __future__ import annotations

import html
import itertools
import logging
import math
import random
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import gevent
from locust import FastHttpUser, between, events, task
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner, WorkerRunner

from tools.protocol import (
    FIRST_LOGIN,
    NEW_USER_PASSWORD,
    SEED_PASSWORD,
    SERVED,
    TASK_ENDS,
    WEIGHTS,
    bar_from_env,
    csrf_token_of,
    from_locust,
    setting,
    verdict,
)

SEED_USERS = setting("TWEEPY_SEED_USERS")  # 0 until learned from the server when a test starts
PAGE_SIZE = setting("TWEEPY_PAGE_SIZE")
BAR = bar_from_env()


# --- Pure helpers (unit-tested in tests/test_locustfile.py) -----------------------------------


def new_user_name() -> str:
    """A name nobody has, not even a user registered by another locust process: 32 of [a-z0-9_]."""
    return "new_" + uuid.uuid4().hex[:28]


_FORM_ERROR = re.compile(r'<p class="error">([^<]{1,120})</p>')


def explain(status: int, location: str | None = None, page: str = "", error: BaseException | None = None) -> str:
    """What an unexpected answer was, in words stable enough for locust to group the failures."""
    if status == 0:
        return f"no answer ({type(error).__name__ if error else 'connection failed'})"
    if 300 <= status < 400:
        return f"{status} redirect to {urlsplit(location or '').path or '(no Location)'}"
    if status == 400 and "Form expired" in page:
        return "400 CSRF token rejected"
    form_error = _FORM_ERROR.search(page)
    if form_error:
        return f"{status} form error: {html.unescape(form_error.group(1)).strip()}"
    return f"{status}"


def retry_after_s(value: str | None) -> float:
    """The seconds a Retry-After header asks for (its delay form; a date or nonsense: none)."""
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0


def count_seeded(exists: Callable[[int], bool], most: int = 1 << 24) -> int:
    """How many users user1..userN there are, from about 2 log2(N) answers to "is there a user<k>?".

    Seeded names are consecutive from user1, so the count is where they stop: ``k`` doubles until
    a user is missing, then the gap between the last found and the first missing is halved.
    """
    if not exists(1):
        raise LookupError("there is no user1: seed the database (flask --app tweepy seed)")
    found, missing = 1, 2
    while exists(missing):
        if missing >= most:
            raise LookupError(f"user{missing} exists: the names do not stop")
        found, missing = missing, missing * 2
    while missing - found > 1:
        middle = (found + missing) // 2
        found, missing = (middle, missing) if exists(middle) else (found, middle)
    return found


def user_exists_at(host: str) -> Callable[[int], bool]:
    """Whether ``user<k>`` exists on the server at ``host``, asked outside locust's stats.

    Whom a user follows is a range of the follows table's key, cheap at every stage."""

    def exists(k: int) -> bool:
        url = f"{host.rstrip('/')}/users/user{k}/following/"
        try:
            with urllib.request.urlopen(url, timeout=30):
                return True
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise LookupError(f"GET {urlsplit(url).path} answered {error.code}") from None
        except OSError as error:
            raise LookupError(f"GET {url} got no answer ({error})") from None

    return exists


# --- The protocol -----------------------------------------------------------------------------


_accounts_handed_out = itertools.count()
_visitors = itertools.count()
# Visitors of a worker process who got a task through since its last report to the master.
_served_since_report: set[str] = set()


def next_seed_account(worker_index: int = 0) -> int:
    """A seeded account no other locust user of this process has (they wrap around past SEED_USERS).

    The worker processes of one run (``--processes``, or workers on other machines: set
    LOCUST_PROCESSES to how many there are in all) each take every LOCUST_PROCESSES-th
    account, starting at their own index, so they do not share accounts either.
    """
    processes = setting("LOCUST_PROCESSES")
    return (next(_accounts_handed_out) * processes + worker_index % processes) % SEED_USERS + 1


def seeded_account(seed_index: int) -> tuple[str, str]:
    """The account a visitor logs in as, every time: its own seeded one, even after registering
    another, so the people reading timelines stay the seeded population however long the run."""
    return f"user{seed_index}", SEED_PASSWORD


class Visitor(FastHttpUser):
    """Someone using tweepy in a browser, at the talk's mix of actions."""

    host = "http://127.0.0.1:5000"  # run.py; -H or the web UI choose another
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        if SEED_USERS < 2:  # nobody to log in as, or nobody to follow: said when the test started
            self.stop()  # before its first task, quietly
            return
        self.token: str | None = None  # the CSRF token of the last page fetched
        self.retry_at = 0.0  # when a busy site asked to be tried again (time.monotonic())
        self.logged_in = False
        self.followed: set[str] = set()
        worker_index = getattr(self.environment.runner, "worker_index", 0)
        self.key = f"{worker_index}-{next(_visitors)}"  # who this visitor is, among every process's
        self.seed_index = next_seed_account(worker_index)
        self.name, self.password = seeded_account(self.seed_index)
        # Named apart so the benchmark can tell when every user has logged in once.
        self.log_in(name=FIRST_LOGIN)

    # One request each, checked; what they return is falsy when the answer was wrong.

    def _page(self, path: str, name: str | None = None) -> bool:
        """GET a page (200) and keep its CSRF token for the next form."""
        with self.client.get(path, name=name, allow_redirects=False, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"expected 200, got {self._explain(response)}")
                return False
            token = csrf_token_of(response.text or "")
            if token is None:
                response.failure("the page has no CSRF token")
                return False
            self.token = token
            response.success()
            self._done(f"GET {name or path}")
            return True

    def _form(self, path: str, fields: dict[str, str], name: str | None = None, to: str | None = None) -> str | None:
        """POST a form with the current CSRF token; expect a 303 (to the path ``to``, when given).

        Returns the path redirected to, or None when the answer was wrong."""
        data = {"csrf_token": self.token or "", **fields}
        with self.client.post(path, data=data, name=name, allow_redirects=False, catch_response=True) as response:
            location = response.headers.get("Location") if response.headers else None
            if response.status_code in (429, 503) and response.headers:
                self.retry_at = time.monotonic() + retry_after_s(response.headers.get("Retry-After"))
            if response.status_code != 303:
                response.failure(f"expected 303, got {self._explain(response)}")
                return None
            target = urlsplit(location or "").path
            if to is not None and target != to:
                response.failure(f"expected 303 to {to}, got {self._explain(response)}")
                return None
            response.success()
            self._done(f"POST {name or path}")
            return target

    def _done(self, request: str) -> None:
        """Count this visitor as served when the request ends a protocol task."""
        if request in TASK_ENDS:
            if isinstance(self.environment.runner, WorkerRunner):
                _served_since_report.add(self.key)
            else:
                SERVED.add((self.key,))

    @staticmethod
    def _explain(response) -> str:
        location = response.headers.get("Location") if response.headers else None
        page = (response.text or "") if response.status_code >= 400 else ""
        return explain(response.status_code, location, page, getattr(response, "error", None))

    # The steps of the tasks.

    def log_in(self, name: str | None = None) -> None:
        gevent.sleep(max(0.0, self.retry_at - time.monotonic()))  # as long as a refusal asked
        if not self._page("/"):
            return
        account, password = seeded_account(self.seed_index)
        if account != self.name:  # back from the account it registered: whom that one followed is not its own
            self.followed.clear()
        self.name, self.password = account, password
        fields = {"name": account, "password": password, "next": ""}
        self.logged_in = self._form("/", fields, name=name, to="/tweets/") is not None
        if self.logged_in:
            self._page("/tweets/")  # where the browser lands, with the new session's token

    def logged_in_first(self) -> bool:
        """Whether the person is logged in; one whose login failed (a busy site, say) tries again first."""
        if not self.logged_in:
            self.log_in()
            return False
        return True

    def log_out(self) -> bool:
        if self._form("/logout/", {}, to="/") is None:
            return False
        self.logged_in = False
        return True

    def _someone_else(self) -> str:
        while True:
            other = random.randint(1, SEED_USERS)
            if other != self.seed_index:  # following yourself is a 400 by design
                return f"user{other}"

    # The tasks, weighted as in the talk.

    @task(WEIGHTS["register"])
    def register(self) -> None:
        if not self.logged_in_first():
            return
        if not self.log_out() or not self._page("/register/"):
            return
        name = new_user_name()
        password = NEW_USER_PASSWORD
        fields = {"name": name, "email": f"{name}@example.com", "password": password, "confirm": password}
        target = self._form("/register/", fields)
        if target is None:
            return
        self.name, self.password = name, NEW_USER_PASSWORD
        self.followed.clear()
        if target != "/tweets/":  # the contract lets registering send people to the login form instead
            self.log_in()
        else:
            self.logged_in = True
            self._page("/tweets/")  # where the browser lands, with the new session's token

    @task(WEIGHTS["log_out_and_in"])
    def log_out_and_in(self) -> None:
        if not self.logged_in_first():
            return
        if self.log_out():
            self.log_in()

    @task(WEIGHTS["list_tweets"])
    def list_tweets(self) -> None:
        if not self.logged_in_first():
            return
        self._page("/tweets/")

    @task(WEIGHTS["write_tweet"])
    def write_tweet(self) -> None:
        if not self.logged_in_first():
            return
        words = random.choices(_WORDS, k=random.randint(3, 20))
        self._form("/tweets/", {"tweet": " ".join(words)}, to="/tweets/")

    @task(WEIGHTS["list_users"])
    def list_users(self) -> None:
        if not self.logged_in_first():
            return
        page = random.randint(1, math.ceil(SEED_USERS / PAGE_SIZE))
        self._page(f"/users/?page={page}", name="/users/?page=[n]")

    @task(WEIGHTS["follow"])
    def follow(self) -> None:
        if not self.logged_in_first():
            return
        other = self._someone_else()
        if self._form(f"/users/{other}/follow", {"next": "/users/"}, name="/users/[name]/follow") is not None:
            self.followed.add(other)

    @task(WEIGHTS["unfollow"])
    def unfollow(self) -> None:
        if not self.logged_in_first():
            return
        # Someone followed earlier in this session when there is one, so most unfollows delete a row.
        other = self.followed.pop() if self.followed else self._someone_else()
        self._form(f"/users/{other}/unfollow", {"next": "/users/"}, name="/users/[name]/unfollow")


_WORDS = (  # noqa: SIM905 (one sentence reads better than 27 quoted words)
    "locusts are hungry early today the queue grows robots serve faster cache reads "
    "scale vertically bob has an idea paging is hard but necessary coffee lunch rush"
).split()


# --- How many users there are ------------------------------------------------------------------


@events.test_start.add_listener
def _learn_how_many_users_are_seeded(environment, **_kwargs) -> None:
    # Each test, as the web UI may point the next one at another server; a master runs no users.
    global SEED_USERS
    if setting("TWEEPY_SEED_USERS") or isinstance(environment.runner, MasterRunner):
        return
    host = environment.host or Visitor.host
    try:
        SEED_USERS = count_seeded(user_exists_at(host))
        if SEED_USERS < 2:
            raise LookupError("only user1 is seeded, and the protocol follows someone else")
    except LookupError as error:
        SEED_USERS = 0
        logging.error("cannot tell how many users %s holds: %s; set TWEEPY_SEED_USERS", host, error)
        if getattr(environment.parsed_options, "headless", False) and not isinstance(environment.runner, WorkerRunner):
            gevent.spawn(environment.runner.quit)
        return
    logging.info("%s holds %d seeded users (user1..user%d)", host, SEED_USERS, SEED_USERS)


# --- Who was served, from worker processes to the master ----------------------------------------


@events.report_to_master.add_listener
def _report_served_visitors(client_id, data, **_kwargs) -> None:
    # The master adds them to the window it is measuring: a report's interval is the window's slack.
    data["tweepy_served"] = sorted(_served_since_report)
    _served_since_report.clear()


@events.worker_report.add_listener
def _gather_served_visitors(client_id, data, **_kwargs) -> None:
    SERVED.add(data.get("tweepy_served") or ())


# --- The verdict ------------------------------------------------------------------------------


def _judge(environment) -> tuple[bool, str]:
    by_type, total = from_locust(environment.stats)
    return verdict(by_type, total, environment.stats.total.total_rps, BAR)


@events.test_stop.add_listener
def _say_verdict_when_a_web_ui_test_stops(environment, **_kwargs) -> None:
    # Headless runs say it once, on quitting, from the final stats.
    if isinstance(environment.runner, WorkerRunner) or getattr(environment.parsed_options, "headless", True):
        return
    # A master's last numbers arrive with the workers' next periodic report.
    lag = WORKER_REPORT_INTERVAL + 1 if isinstance(environment.runner, MasterRunner) else 0
    gevent.spawn_later(lag, lambda: print(_judge(environment)[1], flush=True))


@events.quitting.add_listener
def _say_verdict_and_set_exit_code(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    ok, line = _judge(environment)
    print(line, flush=True)
    if not ok:
        environment.process_exit_code = 1
