"""The bench's data and a stage served on it: one seeded database per size, copied afresh
for every stage, and PostgreSQL and Redis reached through delay relays when the plan asks.
One stage at a time is served from ``var/bench/`` (``sole_user``): a bench, a profile and the
tests' quick bench all use it and the database ``tweepy_bench``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from tools import netdelay, services, stages
from tools.bench.machine import ROOT, say
from tools.bench.plan import Plan
from tools.bench.procfs import cpu_seconds

WORK = stages.VAR / "bench"
# Where PostgreSQL and Redis listen when their URL does not say.
PORTS = {"postgresql": 5432, "redis": 6379}


def seeded_master(plan: Plan) -> Path:
    """One seeded database per size, made once and copied for every stage."""
    schema = stages.schema_head()
    master = WORK / f"seed-u{plan.users}-t{plan.tweets}-f{plan.follows}-c{plan.bcrypt_cost}-r{schema}.sqlite3"
    if master.exists():
        return master
    WORK.mkdir(parents=True, exist_ok=True)
    making = master.with_suffix(".making")
    making.unlink(missing_ok=True)
    env = {
        **os.environ,
        "TWEEPY_DATABASE_URL": f"sqlite:///{making}",
        "TWEEPY_BCRYPT_LOG_ROUNDS": str(plan.bcrypt_cost),
    }
    flask = [str(stages.BIN / "flask"), "--app", "tweepy"]
    say(f"seeding {plan.users} users, {plan.tweets} tweets, {plan.follows} follows each into {master.name}")
    subprocess.run([*flask, "db", "upgrade"], env=env, cwd=ROOT, check=True, capture_output=True)
    sizes = ["--users", str(plan.users), "--tweets", str(plan.tweets), "--follows", str(plan.follows)]
    subprocess.run([*flask, "seed", *sizes], env=env, cwd=ROOT, check=True)
    making.rename(master)
    return master


def fresh_copy(master: Path, target: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(master, target)
    return target


@contextlib.contextmanager
def sole_user():
    """Hold ``var/bench/`` and the database ``tweepy_bench`` for this process: another bench, profile or
    test run starting meanwhile would recreate them under it, so it is refused, naming this one."""
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "in-use", "a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            raise SystemExit(
                f"{WORK.relative_to(ROOT)}/ is in use by process {held.read().strip() or '?'} (a bench, a profile"
                " or the tests' quick bench): wait for it to end, or stop it"
            ) from None
        held.truncate(0)
        held.write(str(os.getpid()))
        held.flush()
        yield


@contextlib.contextmanager
def served(plan: Plan, stage: stages.Stage, master: Path):
    """The stage started afresh, as ``make run`` would, on a fresh copy of the bench's data and empty
    caches: yields its ``Running`` and, with ``TWEEPY_BENCH_NETWORK_DELAY_MS``, its relays' figures.
    Only while no other process serves from ``var/bench/`` (``sole_user``)."""
    with sole_user(), _served(plan, stage, master) as served_stage:
        yield served_stage


@contextlib.contextmanager
def _served(plan: Plan, stage: stages.Stage, master: Path):
    seed = None
    if stage.app_setting("DATABASE_URL").startswith("postgresql"):
        # The same data, seeded anew (COPY) into a database of the bench's own on the stage's server.
        database_url = services.recreate_database(
            stage.app_setting("DATABASE_URL"), "tweepy_bench", WORK / "instance" / "pgpass"
        )
        seed = ["--users", str(plan.users), "--tweets", str(plan.tweets), "--follows", str(plan.follows)]
    else:
        database_url = f"sqlite:///{fresh_copy(master, WORK / 'bench.sqlite3')}"
    env = {
        "TWEEPY_DATABASE_URL": database_url,
        "TWEEPY_INSTANCE_PATH": str(WORK / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": str(plan.bcrypt_cost),
        # The load generator plays thousands of people from one address: neither counted nor refused by address.
        "TWEEPY_UNTHROTTLED_ADDRESSES": stages.LOAD_GENERATOR_ADDRESS,
        # A fresh database gets fresh keys in a shared Redis (stages caching there).
        "TWEEPY_CACHE_KEY_PREFIX": f"tweepy-bench-{time.time_ns()}:",
    }
    var = WORK / f"stage{stage.slug}"
    shutil.rmtree(var, ignore_errors=True)
    with contextlib.ExitStack() as relays:
        network = None
        if plan.network_delay_ms and networked_servers(stage, env):
            # Seeded directly (COPY through a relay would only be slower), then served through the relays.
            stages.prepare_database(stage, stages.stage_env(stage, 0, env), seed)
            seed, network = None, delay_relays(plan.network_delay_ms, stage, env, relays)
            trip = network["round_trip_ms"]
            say(f"  stage {stage.label}: PostgreSQL and Redis through relays, {trip} ms a round trip")
        running = relays.enter_context(stages.start(stage, port=stages.free_port(), var=var, env=env, seed=seed))
        yield running, network
        if network:
            network["relay_cpu_s"] = round(cpu_seconds(network.pop("pids")), 1)


def networked_servers(stage: stages.Stage, env: dict) -> dict[str, str]:
    """The stage's database and cache URLs, by the variables that set them, where they are servers it
    reaches over the network (PostgreSQL, Redis), not files."""
    servers = {"TWEEPY_DATABASE_URL": env.get("TWEEPY_DATABASE_URL") or stage.app_setting("DATABASE_URL")}
    if stage.app_setting("CACHE") == "redis" or stage.app_value("THROTTLE_IN_REDIS"):
        servers["TWEEPY_CACHE_URL"] = env.get("TWEEPY_CACHE_URL") or stage.app_setting("CACHE_URL")
    return {name: url for name, url in servers.items() if url.startswith(tuple(PORTS))}


def delay_relays(delay_ms: float, stage: stages.Stage, env: dict, relays: contextlib.ExitStack) -> dict:
    """Relays delaying PostgreSQL and Redis by ``delay_ms`` each way; ``env`` is pointed at them."""
    pids, round_trip = [], None
    for name, text in networked_servers(stage, env).items():
        url, port = make_url(text), stages.free_port()
        backend = url.get_backend_name()
        target = (url.host or "127.0.0.1", url.port or PORTS[backend])
        pids.append(relays.enter_context(netdelay.relay(*target, delay_ms, port)).pid)
        env[name] = url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        if backend == "redis":
            round_trip = round(netdelay.round_trip_ms(port), 2)
    return {"delay_ms_each_way": delay_ms, "round_trip_ms": round_trip, "pids": pids}
