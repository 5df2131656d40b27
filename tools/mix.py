"""``make mix STAGE=N``: the protocol's requests that do not hash, sent in one process straight to the app.

    python -m tools.mix 6                              100 people, 3 rounds of 5,000 requests
    python -m tools.mix 6 --requests 20000 --rounds 5
    python -m tools.mix 6 --profile                    and where the time goes, function by function

What a change to the app costs or saves, in seconds rather than a benchmark's
half hour: the stage's app settings, on a fresh SQLite database seeded small
(``--seed-users``, ``--seed-tweets``), logged-in people sending the protocol's
timeline reads, tweets, user lists, follows and unfollows with its weights
(``tools/protocol.py``) through Flask's test client, and the process's CPU time
a request. Logins and registrations are left out: their cost is bcrypt's.

It is not a benchmark: no nginx, no uWSGI, no gevent, no network, and the test
client's own work counted in. Compare two trees or two settings with it, run in
turn on the same machine; ``make bench`` and ``make profile`` say what a stage
serves.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import shutil
import statistics
import sys
import time
from collections import Counter

from tools import stages
from tools.protocol import SEED_PASSWORD, TASKS, csrf_token_of
from tweepy import config, create_app

WORK = stages.VAR / "mix"
# The protocol's tasks that send one request and hash nothing, with their weights.
MIX = {t.name: t.weight for t in TASKS if len(t.requests) == 1}


class Person:
    """One logged-in test client, keeping the token of the last page it saw, as the locustfile does."""

    def __init__(self, app, number: int, seed_users: int) -> None:
        self.client, self.number, self.seed_users = app.test_client(), number, seed_users
        self.user_pages = -(-seed_users // app.config["PAGE_SIZE"])
        self.name, self.token, self.followed = f"user{number}", "", []
        self.page("/")
        self.form("/", {"name": self.name, "password": SEED_PASSWORD, "next": ""})
        self.page("/tweets/")

    def page(self, path: str) -> int:
        response = self.client.get(path)
        self.token = csrf_token_of(response.get_data(as_text=True)) or self.token
        return response.status_code

    def form(self, path: str, fields: dict[str, str]) -> int:
        return self.client.post(path, data={"csrf_token": self.token, **fields}).status_code

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
    """The stage's app on a fresh seeded SQLite database of the mix's own (bcrypt at its lowest cost)."""
    url = stage.app_setting("DATABASE_URL")  # empty: SQLite in the instance folder
    if url and not url.startswith("sqlite"):
        raise SystemExit(f"stage {stage.label} runs on {url.split(':')[0]}; the mix runs the SQLite stages")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    local = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{WORK / 'mix.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(WORK / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        "TWEEPY_UNTHROTTLED_ADDRESSES": "127.0.0.1",
    }
    env = stages.stage_env(stage, stage.default_port, local)
    seed = ["--users", str(seed_users), "--tweets", str(seed_tweets), "--follows", "20"]
    stages.prepare_database(stage, env, seed=seed)
    names = [k.removeprefix("TWEEPY_") for k in env if k in stages.APP_SETTING_NAMES]
    return create_app({name: config.parse(config.BY_NAME[name], env[f"TWEEPY_{name}"]) for name in names})


def run(people: list[Person], requests: int, rng: random.Random) -> tuple[float, Counter, Counter]:
    """Send ``requests`` requests; the CPU time a request, in ms, and what was sent and answered."""
    tasks, weights = list(MIX), list(MIX.values())
    sent, unexpected = Counter(), Counter()
    started = time.process_time()
    for _ in range(requests):
        name, status = rng.choice(people).act(rng.choices(tasks, weights)[0], rng)
        sent[name] += 1
        if status not in (200, 303):
            unexpected[f"{name} {status}"] += 1
    return 1000 * (time.process_time() - started) / requests, sent, unexpected


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
    parser.add_argument("--people", type=int, default=100, help="logged-in test clients")
    parser.add_argument("--requests", type=int, default=5000, help="requests a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed-users", type=int, default=2000)
    parser.add_argument("--seed-tweets", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile (slower)")
    args = parser.parse_args(argv)
    stage = stages.get_stage(args.stage)
    app = build_app(stage, args.seed_users, args.seed_tweets)
    rng = random.Random(42)
    people = [Person(app, n, args.seed_users) for n in range(1, min(args.people, args.seed_users) + 1)]
    print(f"==> stage {stage.label}, in one process: {len(people)} people on {args.seed_users:,} seeded users")
    run(people, args.requests, rng)  # warm-up: caches filled, pages kept
    figures = []
    for number in range(1, args.rounds + 1):
        ms, sent, unexpected = run(people, args.requests, rng)
        figures.append(ms)
        print(f"round {number}: {ms:.3f} ms of CPU a request ({args.requests:,} requests)")
        if unexpected:
            print(f"unexpected answers: {dict(unexpected)}: the figures measure errors, not the mix")
            return 1
    print(f"sent (last round): {dict(sent)}")
    print(f"median: {statistics.median(figures):.3f} ms of CPU a request, in one process (not a benchmark)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run, people, args.requests, rng)
        print(profile_table(profiler, args.requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
