"""The benchmark's protocol and its bar, in one place the locustfile and ``tools/bench`` both read.

This module never imports locust: the bench, the tests and the reports use it in processes that
must not be monkey-patched by gevent. What lives here:

- the protocol's tasks, their weights (the talk's) and the requests each one sends, by locust
  stats name (``METHOD name``), so the hashing share of the traffic is counted, not guessed;
- the bar (:class:`Bar`) and :func:`verdict`, which judges every request type, not only the
  aggregate, from plain :class:`RequestStats`;
- every ``TWEEPY_BENCH_*``, ``TWEEPY_BAR_*`` and ``TWEEPY_SEED_USERS`` setting, declared once in
  :data:`SETTINGS` with its default and what it does, as ``tweepy/config.py``'s ``Setting``.
- :func:`csrf_token_of`, how a page's form token is read, as the locustfile and ``make mix`` submit it.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tweepy import config as app_config
from tweepy.config import Setting

# tweepy/cli.py seeds every user with this password too (its own SEED_PASSWORD): keep them equal.
SEED_PASSWORD = "tweepy123"
NEW_USER_PASSWORD = SEED_PASSWORD

# Stats keys, "METHOD name" as locust's stats name them.
FIRST_LOGIN = "/ [first login]"  # the name of each user's login on start, so the bench can wait for them
FIRST_LOGIN_KEY = f"POST {FIRST_LOGIN}"
LOG_IN = "POST /"
REGISTER = "POST /register/"
TIMELINE = "GET /tweets/"
WRITE = "POST /tweets/"
AGGREGATED = "Aggregated"
# The request types every report shows next to the aggregate.
SHOWN = ((LOG_IN, "log in"), (REGISTER, "register"), (TIMELINE, "timeline"), (WRITE, "write"))
# Requests that hash a password with bcrypt (a failed login hashes too, but a failure is a miss anyway).
HASHING = (LOG_IN, REGISTER, FIRST_LOGIN_KEY)


@dataclass(frozen=True)
class Task:
    name: str
    weight: int
    requests: tuple[str, ...]  # the stats keys it sends when every answer is right


ON_START = ("GET /", FIRST_LOGIN_KEY, TIMELINE)
TASKS: tuple[Task, ...] = (
    Task("register", 1, ("POST /logout/", "GET /register/", REGISTER, TIMELINE)),
    Task("log_out_and_in", 2, ("POST /logout/", "GET /", LOG_IN, TIMELINE)),
    Task("list_tweets", 200, (TIMELINE,)),
    Task("write_tweet", 20, (WRITE,)),
    Task("list_users", 5, ("GET /users/?page=[n]",)),
    Task("follow", 5, ("POST /users/[name]/follow",)),
    Task("unfollow", 5, ("POST /users/[name]/unfollow",)),
)
WEIGHTS = {t.name: t.weight for t in TASKS}
REQUEST_TYPES = tuple(dict.fromkeys([*ON_START, *(r for t in TASKS for r in t.requests)]))
TASKS_PER_CYCLE = sum(t.weight for t in TASKS)  # 238
REQUESTS_PER_CYCLE = sum(t.weight * len(t.requests) for t in TASKS)  # 247
HASHES_PER_CYCLE = sum(t.weight * sum(r in HASHING for r in t.requests) for t in TASKS)  # 3
# The request that completes each task (and a visitor's start): what a person came for, got.
TASK_ENDS = frozenset(t.requests[-1] for t in TASKS) | {ON_START[-1]}


# --- Settings -------------------------------------------------------------------------------------


SETTINGS: tuple[Setting, ...] = (
    # What the load generator needs to know about the database it logs in to.
    Setting(
        "TWEEPY_SEED_USERS",
        0,
        "Users the database was seeded with (user1..userN); unset: the locustfile asks the server",
        2,  # someone to follow
    ),
    # The bar.
    Setting("TWEEPY_BAR_P95_MS", 2000.0, "Every request type's p95, and the aggregate's, must stay below this", 1),
    Setting("TWEEPY_BAR_FAILURES", 0, "Failed requests allowed", 0),
    Setting("TWEEPY_BAR_MIN_REQUESTS", 5, "A request type with fewer requests is too rare for its p95 to be judged", 1),
    # The bench (make bench; python -m tools.bench).
    Setting("TWEEPY_BENCH_USERS", 10_000, "Users seeded into the bench's database", 2),
    Setting("TWEEPY_BENCH_TWEETS", 1_000_000, "Tweets seeded into the bench's database", 0),
    Setting("TWEEPY_BENCH_FOLLOWS", 20, "Follows seeded for each user", 0),
    Setting(
        "TWEEPY_BENCH_STEPS",
        "25 50 100 200 300 400 450 500 550 600 700 800 1000 1200",
        "Locust users of each search step (finer where the stages reach their capacity)",
    ),
    Setting("TWEEPY_BENCH_WINDOW", 60.0, "Seconds measured at each step, once every user has logged in", 1),
    Setting("TWEEPY_BENCH_WARMUP", 10.0, "Seconds before the first window (caches fill); judged with the ramp", 0),
    Setting(
        "TWEEPY_BENCH_RAMP_LIMIT", 600.0, "Seconds a step may take to log its users in; past it, the step misses", 1
    ),
    Setting(
        "TWEEPY_BENCH_SPAWN_RATE", 5.0, "New users a second in a ramp (the bench sets a share of the hashing rate)", 0.1
    ),
    Setting(
        "TWEEPY_BENCH_CAPACITY_WINDOWS",
        3,
        "Windows the capacity step rests on, the search's own included; a run publishes only with 3 or more",
        1,
    ),
    Setting("TWEEPY_BENCH_OVERLOAD", 2.0, "Users of the overload step, times the capacity's (0: no overload step)", 0),
    Setting("TWEEPY_BENCH_OVERLOAD_MAX_USERS", 2400, "The overload step never runs more users than this", 1),
    Setting(
        "TWEEPY_BENCH_COLD_RATE", 5.0, "Users arriving a second in the cold start (a fresh stage, empty caches)", 0.1
    ),
    Setting("TWEEPY_BENCH_COLD_USERS", 100, "Users of the cold start (the bench sets the capacity step's)", 1),
    Setting(
        "TWEEPY_BENCH_COLD_WINDOWS",
        3,
        "Windows of the cold start, each judged; its figures are their medians (0: none)",
        0,
    ),
    Setting(
        "TWEEPY_BENCH_TARGET_SHARE",
        0.55,
        "The default stage's cold start and herd run again at this share of its bcrypt bound, in users (0: not)",
        0,
    ),
    Setting("TWEEPY_BENCH_HERD", 2.0, "Users of the herd that follows the cold start, times its users, all at once", 1),
    Setting(
        "TWEEPY_BENCH_HERDS", 3, "Herds in turn, each after the last one's way back and a window; figures: medians", 1
    ),
    Setting(
        "TWEEPY_BENCH_RECOVERY_WINDOW", 10.0, "Seconds of each window judged after the herd, until one meets the bar", 1
    ),
    Setting(
        "TWEEPY_BENCH_RECOVERY_LIMIT", 120.0, "Seconds after the herd past which the stage is said not to recover", 1
    ),
    Setting("TWEEPY_BENCH_CEILING_USERS", 50, "Users asking for /healthz with no think time, for the stack ceiling", 1),
    Setting(
        "TWEEPY_BENCH_NETWORK_DELAY_MS",
        0.0,
        "Added each way between the app and PostgreSQL or Redis (tools/netdelay.py), as if on other hosts",
        0,
    ),
    Setting("TWEEPY_BENCH_OUT", "bench-steps.json", "Where the load shape writes its steps (the bench sets it)"),
    Setting("TWEEPY_BENCH_SERVER_PIDS", "", "Server pids whose process trees' CPU and memory are measured"),
    Setting("TWEEPY_BENCH_TIERS", "", "Tiers measured apart, 'name=pid,pid name=pid' (nginx, app nodes, PostgreSQL)"),
    Setting("LOCUST_PROCESSES", 1, "Load generator processes on this machine (locust --processes)", 1),
)
_BY_NAME = {s.name: s for s in SETTINGS}
# Read here too, but declared by the app: how many users a page of /users/ lists.
_BY_NAME["TWEEPY_PAGE_SIZE"] = Setting("TWEEPY_PAGE_SIZE", app_config.BY_NAME["PAGE_SIZE"].default, "", 1)


def setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """A declared setting's value from the environment, of its default's type, checked."""
    declared = _BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    return declared.parse(raw) if raw else declared.default


def numbers(text: str) -> tuple[int, ...]:
    """Users of each step, from "25 50 100" or "25,50,100"."""
    return tuple(int(n) for n in text.replace(",", " ").split())


# --- The bar ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    max_p95_ms: float = 2000.0  # every p95 must stay strictly below this
    max_failures: int = 0
    min_requests: int = 5  # a request type with fewer is not judged on its p95

    def text(self) -> str:
        return (
            f"p95 < {self.max_p95_ms:.0f} ms for all requests and for every request type with at least "
            f"{self.min_requests} requests, at most {self.max_failures} failed request(s)"
        )


def bar_from_env(environ: Mapping[str, str] | None = None) -> Bar:
    return Bar(
        max_p95_ms=setting("TWEEPY_BAR_P95_MS", environ),
        max_failures=setting("TWEEPY_BAR_FAILURES", environ),
        min_requests=setting("TWEEPY_BAR_MIN_REQUESTS", environ),
    )


@dataclass(frozen=True)
class RequestStats:
    """What the bar needs of one request type (or of all requests: ``name == AGGREGATED``)."""

    name: str  # "METHOD name", as locust's stats name it
    requests: int
    failures: int = 0
    p95_ms: float = 0
    max_ms: float = 0


def from_locust(stats) -> tuple[list[RequestStats], RequestStats]:
    """Plain per-type and aggregate figures from a locust ``RequestStats`` collection (duck-typed)."""

    def plain(entry, name: str) -> RequestStats:
        p95 = entry.get_response_time_percentile(0.95) if entry.num_requests else 0
        return RequestStats(
            name, entry.num_requests, entry.num_failures, p95 or 0, round(entry.max_response_time or 0, 1)
        )

    by_type = [plain(e, f"{e.method} {e.name}") for e in stats.entries.values()]
    return by_type, plain(stats.total, AGGREGATED)


def slowest(by_type: Iterable[RequestStats], bar: Bar) -> RequestStats | None:
    """The judged request type with the highest p95."""
    return max((t for t in by_type if t.requests >= bar.min_requests), key=lambda t: t.p95_ms, default=None)


def misses(by_type: Iterable[RequestStats], total: RequestStats, bar: Bar = Bar()) -> list[str]:
    """What missed the bar, in words; empty when it was met."""
    by_type = list(by_type)
    found = []
    if total.requests == 0:
        found.append("no requests were made")
    if total.p95_ms >= bar.max_p95_ms:
        found.append(f"p95 of all requests too slow ({total.p95_ms:.0f} ms)")
    slow = sorted(
        (t for t in by_type if t.requests >= bar.min_requests and t.p95_ms >= bar.max_p95_ms), key=lambda t: -t.p95_ms
    )
    if slow:
        found.append("p95 too slow for " + ", ".join(f"{t.name} ({t.p95_ms:.0f} ms)" for t in slow))
    if total.failures > bar.max_failures:
        failing = [f"{t.name} {t.failures}" for t in sorted(by_type, key=lambda t: -t.failures) if t.failures]
        found.append(f"{total.failures} failures ({', '.join(failing)})" if failing else f"{total.failures} failures")
    return found


def verdict(by_type: Iterable[RequestStats], total: RequestStats, rps: float, bar: Bar = Bar()) -> tuple[bool, str]:
    """Whether a run meets the bar, and the one line that says so, naming the slowest request type."""
    by_type = list(by_type)
    worst = slowest(by_type, bar)
    figures = f"{rps:.1f} req/s, p95 {total.p95_ms:.0f} ms, {total.failures} failures in {total.requests} requests"
    if worst is not None:
        figures += f"; slowest: {worst.name} p95 {worst.p95_ms:.0f} ms"
    missed = misses(by_type, total, bar)
    line = f"{figures} (bar: {bar.text()})"
    if missed:
        return False, f"BAR MISSED: {line}: {'; '.join(missed)}"
    return True, f"BAR MET: {line}"


def completed_tasks(by_type: Iterable[RequestStats]) -> int:
    """Protocol tasks that got through: each ends with one request of ``TASK_ENDS`` answered as expected,
    so a refused login's retries (the login form fetched again, the login refused) count for nothing."""
    return sum(t.requests - t.failures for t in by_type if t.name in TASK_ENDS)


def hashes_done(by_type: Iterable[RequestStats]) -> int:
    """bcrypt hashes the server did for these requests: every successful log in and registration."""
    return sum(t.requests - t.failures for t in by_type if t.name in HASHING)


class ServedVisitors:
    """Which visitors got at least one protocol task through since a window began, by a key of
    their own: the locustfile adds them as their tasks end (a worker process ships its own to the
    master with its periodic report), the load shape reads how many at the end of a window."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def start(self) -> None:
        self.keys.clear()

    def add(self, keys: Iterable[str]) -> None:
        self.keys.update(keys)

    def count(self) -> int:
        return len(self.keys)


SERVED = ServedVisitors()


_CSRF_INPUT = re.compile(r"""<input\b[^>]*\bname\s*=\s*["']?csrf_token["'\s/>][^>]*>""", re.IGNORECASE)
_VALUE = re.compile(r"""\bvalue\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)


def csrf_token_of(page: str) -> str | None:
    """The CSRF token of the first form of an HTML page that has one (Flask-WTF's hidden ``csrf_token``)."""
    tag = _CSRF_INPUT.search(page)
    if tag is None:
        return None
    value = _VALUE.search(tag.group(0))
    if value is None:
        return None
    token = html.unescape(next(group for group in value.groups() if group is not None))
    return token or None
