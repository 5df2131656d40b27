"""``make mix STAGE=N``: the protocol's requests that do not hash, sent in one process straight to the app.

    python -m tools.mix 6                              100 people, 3 rounds of 5,000 requests
    python -m tools.mix 6 --requests 20000 --rounds 5
    python -m tools.mix 6 --profile                    and where the time goes, function by function

What a change to the app costs or saves, in seconds: the stage's app settings on a small fresh
database (SQLite; or PostgreSQL and Redis, whose CPU is counted beside), logged-in people sending
the protocol's reads, tweets and follows with its weights (``tools/protocol.py``), and the
process's CPU a request, by type and before any view runs. Logins and registrations are left out:
their cost is bcrypt's. Each request is a call of the WSGI app with a server's environ
(``Person.send``), cookies kept, so only the app's own work counts. It is not a benchmark (no
nginx, uWSGI, gevent or network): compare two trees or two settings with it on one machine;
``make bench`` and ``make profile`` say what a stage serves.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import urlencode

from flask import Flask
from flask_login import login_required

from tools import services, stages
from tools.bench.procfs import cpu_seconds, process_tree
from tools.protocol import SEED_PASSWORD, TASKS, csrf_token_of
from tools.stages.model import instance_folder
from tweepy import config, create_app

WORK = stages.VAR / "mix"
# The protocol's tasks that send one request and hash nothing, with their weights.
MIX = {t.name: t.weight for t in TASKS if len(t.requests) == 1}


def send(app, cookies: dict[str, str], method: str, path: str, form: dict[str, str] | None = None) -> tuple[int, bytes]:
    """The app called as a WSGI server calls it, with ``cookies``, which keep what the answer sets (as a browser)."""
    path, _, query = path.partition("?")
    body = urlencode(form).encode() if form is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if cookies:
        environ["HTTP_COOKIE"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
    if form is not None:
        environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
        environ["CONTENT_LENGTH"] = str(len(body))
    answer: dict = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info=None) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), headers

    chunks = app(environ, start_response)
    try:
        page = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    for name, value in answer["headers"]:
        if name.lower() == "set-cookie":
            for cookie in SimpleCookie(value).values():
                if cookie.value:
                    cookies[cookie.key] = cookie.value
                else:  # cleared (a log out)
                    cookies.pop(cookie.key, None)
    return answer["status"], page


class Person:
    """One logged-in browser: its session cookie, and the token of the last page it saw, as the locustfile keeps."""

    def __init__(self, app, number: int, seed_users: int) -> None:
        self.app, self.number, self.seed_users = app, number, seed_users
        self.user_pages = -(-seed_users // app.config["PAGE_SIZE"])
        self.name, self.token, self.followed = f"user{number}", "", []
        self.cookies: dict[str, str] = {}
        self.page("/")
        self.form("/", {"name": self.name, "password": SEED_PASSWORD, "next": ""})
        self.page("/tweets/")

    def send(self, method: str, path: str, form: dict[str, str] | None = None) -> tuple[int, bytes]:
        return send(self.app, self.cookies, method, path, form)

    def page(self, path: str) -> int:
        status, page = self.send("GET", path)
        self.token = csrf_token_of(page.decode()) or self.token
        return status

    def form(self, path: str, fields: dict[str, str]) -> int:
        return self.send("POST", path, {"csrf_token": self.token, **fields})[0]

    def someone_else(self, rng: random.Random) -> str:
        other = rng.randint(1, self.seed_users - 1)  # following oneself is a 400 by design
        return f"user{other if other < self.number else other + 1}"

    def act(self, task: str, rng: random.Random) -> tuple[str, int]:
        if task == "list_tweets":
            return "GET /tweets/", self.page("/tweets/")
        if task == "write_tweet":
            return "POST /tweets/", self.form("/tweets/", {"tweet": f"mixing {rng.random():.6f}"})
        if task == "list_users":
            return "GET /users/?page=[n]", self.page(f"/users/?page={rng.randint(1, self.user_pages)}")
        if task == "follow":
            other = self.someone_else(rng)
            self.followed.append(other)
            return "POST /users/[name]/follow", self.form(f"/users/{other}/follow", {"next": "/users/"})
        other = self.followed.pop() if self.followed else self.someone_else(rng)
        return "POST /users/[name]/unfollow", self.form(f"/users/{other}/unfollow", {"next": "/users/"})


def build_app(stage: stages.Stage, seed_users: int, seed_tweets: int):
    """The stage's app on a fresh seeded database of the mix's own (bcrypt at its lowest cost): a SQLite
    file, or for a stage on PostgreSQL a database ``tweepy_mix`` on its server, with Redis keys of its own."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    local = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{WORK / 'mix.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(WORK / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        "TWEEPY_UNTHROTTLED_ADDRESSES": "127.0.0.1",
    }
    url = stage.app_setting("DATABASE_URL")
    if url.startswith("postgresql"):
        # The role's password is the one `make run` keeps: this process connects with it as the app does.
        passfile = instance_folder(dict(os.environ)) / "pgpass"
        os.environ["PGPASSFILE"] = str(passfile)
        local["TWEEPY_DATABASE_URL"] = services.recreate_database(url, "tweepy_mix", passfile)
        local["TWEEPY_CACHE_KEY_PREFIX"] = f"tweepy-mix-{time.time_ns()}:"  # a fresh database, fresh keys
    env = stages.stage_env(stage, stage.default_port, local)
    seed = ["--users", str(seed_users), "--tweets", str(seed_tweets), "--follows", "20"]
    stages.prepare_database(stage, env, seed=seed)
    names = [k.removeprefix("TWEEPY_") for k in env if k in stages.APP_SETTING_NAMES]
    return create_app({name: config.BY_NAME[name].parse(env[f"TWEEPY_{name}"]) for name in names})


@dataclass
class Round:
    ms: float  # CPU a request in this process, all requests together
    sent: Counter  # requests by type
    spent: Counter  # CPU seconds by type
    unexpected: Counter  # answers other than a page or a redirect, by type and status
    servers_ms: dict[str, float]  # CPU a request of each server the app talks to (PostgreSQL, Redis)

    def line(self) -> str:
        """The round's CPU a request: this process's, and with the servers' when there are any."""
        if not self.servers_ms:
            return f"{self.ms:.3f} ms of CPU a request"
        servers = ", ".join(f"{name} {ms:.3f}" for name, ms in self.servers_ms.items())
        return f"{self.total_ms:.3f} ms of CPU a request: this process {self.ms:.3f}, {servers}"

    @property
    def total_ms(self) -> float:
        return self.ms + sum(self.servers_ms.values())

    def by_type(self) -> str:
        return "\n".join(
            f"  {name:28s} {1000 * self.spent[name] / count:6.3f} ms  {count:6,} requests"
            for name, count in self.sent.most_common()
        )


def run(people: list[Person], requests: int, rng: random.Random, servers: dict[str, int] | None = None) -> Round:
    """Send ``requests`` requests: the CPU time they took, in all and by type, and what was answered;
    with ``servers`` (name: pid), the CPU each of them and their children spent meanwhile."""
    tasks, weights = list(MIX), list(MIX.values())
    sent, spent, unexpected = Counter(), Counter(), Counter()
    servers = servers or {}
    servers_before = {name: cpu_seconds(process_tree([pid])) for name, pid in servers.items()}
    started = time.process_time()
    for _ in range(requests):
        person, task = rng.choice(people), rng.choices(tasks, weights)[0]
        before = time.process_time()
        name, status = person.act(task, rng)
        spent[name] += time.process_time() - before
        sent[name] += 1
        if status not in (200, 303):
            unexpected[f"{name} {status}"] += 1
    ms = 1000 * (time.process_time() - started) / requests
    servers_ms = {
        name: 1000 * (cpu_seconds(process_tree([pid])) - servers_before[name]) / requests
        for name, pid in servers.items()
    }
    return Round(ms, sent, spent, unexpected, servers_ms)


def servers_of(app) -> dict[str, int]:
    """The servers the app talks to, by name: their processes, whose CPU each round counts."""
    found = {}
    if app.config["DATABASE_URL"].startswith("postgresql"):
        found["PostgreSQL"] = services.postmaster_pid(app.config["DATABASE_URL"])
    if app.config["CACHE"] == "redis":
        found["Redis"] = services.redis_pid(app.config["CACHE_URL"])
    return found


# A view that answers at once: what a request costs around its view, the floor every page stands on.
FLOOR = "/_mix/floor"


def add_floor(app) -> None:
    """``FLOOR`` on ``app``, for logged-in people only, as every page but the forms to log in is."""
    app.add_url_rule(FLOOR, "mix_floor", login_required(lambda: "ok"))


def repeated_ms(app, cookies: dict[str, str], path: str, requests: int) -> float | None:
    """CPU a GET of ``path`` with these cookies, asked ``requests`` times in a row, in ms; None if one was
    not answered with the page."""
    started = time.process_time()
    for _ in range(requests):
        if send(app, cookies, "GET", path)[0] != 200:
            return None
    return 1000 * (time.process_time() - started) / requests


def flask_alone() -> Flask:
    """Flask with nothing added: the same view at ``FLOOR``, no extension, no hook."""
    bare = Flask("mix-floor")
    bare.add_url_rule(FLOOR, "mix_floor", lambda: "ok")
    return bare


def profile_table(profiler: cProfile.Profile, requests: int, rows: int = 25) -> str:
    stats = pstats.Stats(profiler, stream=io.StringIO())
    out = io.StringIO()
    print(
        f"{stats.total_calls / requests:.0f} function calls a request (Python's and built-in); by own time:", file=out
    )
    stats.stream = out
    stats.sort_stats("tottime").print_stats(rows)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mix", description=__doc__.split("\n")[0])
    parser.add_argument("stage", type=int)
    parser.add_argument("--people", type=int, default=100, help="logged-in people")
    parser.add_argument("--requests", type=int, default=5000, help="requests a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed-users", type=int, default=2000)
    parser.add_argument("--seed-tweets", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile (slower)")
    args = parser.parse_args(argv)
    stage = stages.get_stage(args.stage)
    app = build_app(stage, args.seed_users, args.seed_tweets)
    add_floor(app)
    rng = random.Random(42)
    people = [Person(app, n, args.seed_users) for n in range(1, min(args.people, args.seed_users) + 1)]
    print(f"==> stage {stage.label}, in one process: {len(people)} people on {args.seed_users:,} seeded users")
    servers = servers_of(app)
    run(people, args.requests, rng)  # warm-up: caches filled, pages kept
    rounds = []
    for number in range(1, args.rounds + 1):
        last = run(people, args.requests, rng, servers)
        rounds.append(last)
        print(f"round {number}: {last.line()} ({args.requests:,} requests)")
        if last.unexpected:
            print(f"unexpected answers: {dict(last.unexpected)}: the figures measure errors, not the mix")
            return 1
    print(f"sent (last round): {dict(last.sent)}")
    print(f"CPU a request by type (last round):\n{last.by_type()}")
    cookies = dict(people[0].cookies)
    floors = {
        f"around any view (a logged-in GET of {FLOOR}, a view that answers at once)": (app, cookies, FLOOR),
        "Flask alone, the same view": (flask_alone(), {}, FLOOR),
        "a timeline read again, nothing changed": (app, cookies, "/tweets/"),
    }
    for what, (wsgi_app, its_cookies, path) in floors.items():
        ms = repeated_ms(wsgi_app, its_cookies, path, args.requests)
        if ms is None:
            print(f"unexpected answer to {path}: the figures measure an error")
            return 1
        print(f"{what}: {ms:.3f} ms")
    median = statistics.median([each.ms for each in rounds])
    print(f"median: {median:.3f} ms of CPU a request, in one process (not a benchmark)")
    if servers:
        together = statistics.median([each.total_ms for each in rounds])
        print(f"median with {' and '.join(servers)}: {together:.3f} ms of CPU a request (not a benchmark)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run, people, args.requests, rng)
        print(profile_table(profiler, args.requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
