"""A stage served for real (nginx + uWSGI) for the hostile-input and fault tests: started on
its own seeded database, with what it stores and the memory it holds read from outside."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from tools import stages
from tools.bench.procfs import memory_mb, process_tree

SEED_USERS = 30
LOCAL_ADDRESS = "127.0.0.1"  # where every test request comes from


def start_stage(number: int, folder: Path, **settings: str) -> stages.Running:
    """Stage ``number`` on a free port, its database, instance and var folders under ``folder``.

    ``settings`` are app settings without their ``TWEEPY_`` prefix (``BCRYPT_LOG_ROUNDS="12"``).
    The running stage gets a ``database`` attribute: the path of its SQLite file.
    """
    database = folder / "tweepy.sqlite3"
    env = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{database}",
        "TWEEPY_INSTANCE_PATH": str(folder / "instance"),
        # Only to keep the suite quick; the cost itself is a setting like any other.
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        "TWEEPY_WORKER_HEADER": "true",
        # The tests' writers post as fast as they can; the limits on writes have tests of their own.
        "TWEEPY_TWEETS_PER_MINUTE": "1000000",
        "TWEEPY_FOLLOWS_PER_MINUTE": "1000000",
    }
    env.update({f"TWEEPY_{name}": value for name, value in settings.items()})
    seed = ["--users", str(SEED_USERS), "--tweets", "300", "--follows", "5"]
    running = stages.start(stages.get_stage(number), port=stages.free_port(), var=folder / "var", env=env, seed=seed)
    running.database = database
    # The first worker answered /healthz; the others may still be loading the app.
    wait_until(app_servers_ready(running), 60, "every uWSGI worker loaded the app")
    return running


def row_counts(running: stages.Running) -> dict[str, int]:
    """Rows of the tables a request could add to, read from the SQLite file itself."""
    with sqlite3.connect(running.database, timeout=10) as db:
        return {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("users", "tweets", "follows")
        }


def stored_tweet_counts(running: stages.Running, prefix: str) -> dict[str, int]:
    """How many times each tweet starting with ``prefix`` is stored."""
    with sqlite3.connect(running.database, timeout=10) as db:
        rows = db.execute("SELECT text, count(*) FROM tweets WHERE text LIKE ? GROUP BY text", (prefix + "%",))
        return dict(rows.fetchall())


def server_memory_mb(running: stages.Running) -> float:
    """Proportional set size of nginx and uWSGI, every process of both."""
    return memory_mb(process_tree([process.pid for _, process in running.children]))


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f} s: {what}")
        time.sleep(0.1)


def app_servers_ready(running: stages.Running, old: set[int] = frozenset()) -> Callable[[], bool]:
    """True once every uWSGI worker has loaded the app, none of them one of ``old``."""

    def ready() -> bool:
        now = running.ready_workers()
        return len(now) == running.stage.processes and not set(now) & set(old)

    return ready
