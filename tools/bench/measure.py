"""What a bench run measures: the bcrypt bound, a seeded database per size, and for each stage
its stack ceiling and its capacity search (``tools/bench/capacity_shape.py`` inside locust). Also where it
ran: the machine, the load generator and the commit."""

from __future__ import annotations

import contextlib
import csv as csv_module
import json
import multiprocessing
import os
import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from tools import netdelay, services, stages
from tools.bench.figures import protocol_qps_bound
from tools.bench.plan import (
    Plan,
    cold_environment,
    cold_time_limit,
    locust_command,
    search_time_limit,
    shape_environment,
    spawn_rate,
)
from tools.bench.procfs import cpu_seconds, process_tree
from tools.protocol import SEED_PASSWORD
from tweepy import passwords

ROOT = stages.ROOT
WORK = stages.VAR / "bench"
# The generator is the ceiling's bottleneck when its processes are this busy, or the whole machine is.
BUSY = 0.9
# Where PostgreSQL and Redis listen when their URL does not say.
PORTS = {"postgresql": 5432, "redis": 6379}


def say(message: str) -> None:
    print(f"==> {message}" if not message.startswith("  ") else message, flush=True)


# --- where it runs ------------------------------------------------------------------------------


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "host": socket.gethostname(),
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def generator(plan: Plan) -> dict:
    """Where the load came from: the bench always runs locust here, beside the servers."""
    return {"host": socket.gethostname(), "processes": plan.locust_processes, "same_machine_as_servers": True}


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    commit = done.stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return commit + ("+changes" if dirty.stdout.strip() else "")


# --- the bcrypt bound ------------------------------------------------------------------------------


def _hash_for(args: tuple[str, int, float]) -> tuple[int, float, float]:
    """Hashes for ``seconds`` with one bcrypt library: how many, in how long, and the CPU time they took
    (this process's own)."""
    name, cost, seconds = args
    make = passwords.LIBRARIES[name].hash
    count, started, cpu = 0, time.monotonic(), time.process_time()
    while time.monotonic() < started + seconds or count == 0:
        make(SEED_PASSWORD, cost)
        count += 1
    return count, time.monotonic() - started, time.process_time() - cpu


def _probe(pool, name: str, cost: int, seconds: float, cores: int) -> dict:
    loops = pool.map(_hash_for, [(name, cost, seconds)] * cores)
    per_second = sum(count / wall for count, wall, _ in loops)
    return {
        "hashes_per_s": round(per_second, 2),
        "cpu_ms_per_hash": round(1000 * sum(cpu for _, _, cpu in loops) / sum(count for count, _, _ in loops), 1),
    }


def bcrypt_bound(cost: int, seconds: float) -> dict:
    """Hashes a second with every core hashing, the CPU time of one, and the protocol QPS that allows.

    pyca's figures are the run's bound; each bcrypt library this machine has is probed too
    (``libraries``), so a stage is measured against the library it hashes with. Each worker times
    its own hashing loop, so starting the pool (a process per core) is not counted."""
    cores = len(os.sched_getaffinity(0))
    names = [name for name, library in passwords.LIBRARIES.items() if passwords.makes_pycas_hashes(library)]
    with multiprocessing.Pool(cores) as pool:
        libraries = {name: _probe(pool, name, cost, seconds, cores) for name in names}
    return {
        "cost": cost,
        "cores": cores,
        **libraries["pyca"],
        "protocol_qps_bound": round(protocol_qps_bound(libraries["pyca"]["hashes_per_s"]), 1),
        "libraries": libraries,
    }


# --- the database -------------------------------------------------------------------------------------


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


def bench_data_environment(plan: Plan, name: str) -> dict[str, str]:
    """A stage's environment on a fresh copy of the bench's seeded database (``name``.sqlite3)."""
    database = fresh_copy(seeded_master(plan), WORK / f"{name}.sqlite3")
    return {
        "TWEEPY_DATABASE_URL": f"sqlite:///{database}",
        "TWEEPY_INSTANCE_PATH": str(WORK / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": str(plan.bcrypt_cost),
        # The load generator plays thousands of people from one address: neither counted nor refused by address.
        "TWEEPY_UNTHROTTLED_ADDRESSES": stages.LOAD_GENERATOR_ADDRESS,
    }


def fresh_copy(master: Path, target: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(master, target)
    return target


# --- the stack ceiling ------------------------------------------------------------------------------


def aggregated(csv: Path) -> dict:
    """The Aggregated row of a locust ``--csv`` stats file."""
    with open(f"{csv}_stats.csv", newline="") as f:
        for row in csv_module.DictReader(f):
            if row["Name"] == "Aggregated":
                return {
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "rps": round(float(row["Requests/s"]), 1),
                }
    raise RuntimeError(f"no Aggregated row in {csv}_stats.csv")


def ceiling_verdict(rps: float, generator_cores: float, server_cores: float, processes: int, cores: int) -> dict:
    """The ceiling is only the stack's when the generator had room to spare; otherwise a lower bound."""
    why = []
    if generator_cores >= BUSY * processes:
        why.append(f"the generator used {generator_cores:.2f} of its {processes} process(es)")
    if generator_cores + server_cores >= BUSY * cores:
        why.append(f"generator and servers together used {generator_cores + server_cores:.2f} of {cores} cores")
    return {"rps": rps, "lower_bound": bool(why), "why": "; ".join(why)}


def measure_ceiling(plan: Plan, running: stages.Running, raw: Path) -> dict:
    csv = raw / f"stage{running.stage.slug}-ceiling"
    files = "tools/bench/ceiling_locustfile.py"
    command = locust_command(plan, files, running.url, csv, plan.ceiling_users, plan.ceiling_s)
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # CPU shares are sampled inside the run, past locust's start-up (imports, spawning users).
        time.sleep(min(2.0, plan.ceiling_s / 2))
        first = _cpu_of(process.pid, running)
        time.sleep(max(0.5, plan.ceiling_s - min(2.0, plan.ceiling_s / 2) - 0.5))
        last = _cpu_of(process.pid, running)
        process.wait(timeout=plan.ceiling_s + 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    seconds = last["time"] - first["time"]
    generator_cores = (last["generator"] - first["generator"]) / seconds
    server_cores = (last["server"] - first["server"]) / seconds
    figures = aggregated(csv)
    cores = len(os.sched_getaffinity(0))
    return {
        **ceiling_verdict(figures["rps"], generator_cores, server_cores, plan.locust_processes, cores),
        "requests": figures["requests"],
        "failures": figures["failures"],
        "users": plan.ceiling_users,
        "generator_cpu_cores": round(generator_cores, 2),
        "server_cpu_cores": round(server_cores, 2),
    }


def _cpu_of(generator_pid: int, running: stages.Running) -> dict:
    return {
        "time": time.monotonic(),
        "generator": cpu_seconds(process_tree([generator_pid])),
        "server": cpu_seconds(process_tree([p.pid for _, p in running.children])),
    }


# --- the capacity search -------------------------------------------------------------------------------


def tiers_of(running: stages.Running) -> dict[str, list[int]]:
    """The processes of each tier a request goes through: the front, the app nodes, and the
    database and cache servers when they are servers (SQLite and a local cache run inside the
    app processes)."""
    tiers = {"front": [p.pid for name, p in running.children if name in ("nginx",)]}
    tiers["app"] = [p.pid for name, p in running.children if name != "nginx"]
    url = running.stage.app_setting("DATABASE_URL")
    if url.startswith("postgresql"):
        tiers["postgresql"] = [services.postmaster_pid(url)]
    if running.stage.app_setting("CACHE") == "redis":
        tiers["redis"] = [services.redis_pid(running.stage.app_setting("CACHE_URL"))]
    return {name: pids for name, pids in tiers.items() if pids}


def measure_capacity(plan: Plan, running: stages.Running, raw: Path, bound: dict) -> dict:
    """Run the search; its steps, its overload step, and whether it ran to its end."""
    slug, label = running.stage.slug, running.stage.label
    out = raw / f"stage{slug}-steps.json"
    out.unlink(missing_ok=True)
    rate = spawn_rate(plan, bound["hashes_per_s"])
    tiers = tiers_of(running)
    servers = [pid for pids in tiers.values() for pid in pids]
    env = {**os.environ, **shape_environment(plan, out, servers, rate)}
    env["TWEEPY_BENCH_TIERS"] = " ".join(f"{name}={','.join(map(str, pids))}" for name, pids in tiers.items())
    limit = search_time_limit(plan)
    files = "locustfile.py,tools/bench/capacity_shape.py"
    command = locust_command(plan, files, running.url, raw / f"stage{slug}", None, limit)
    log_path = raw / f"stage{slug}-locust.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        shown = None
        try:
            while process.poll() is None:
                time.sleep(2)
                line = progress_line(label, out)
                if line and line != shown:
                    say(line)
                    shown = line
                if not running.alive():
                    say(f"  stage {label}: a server exited during the search")
                    break
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return search_outcome(out, process.returncode, running.alive(), log_path.name)


def measure_cold_start(plan: Plan, running: stages.Running, raw: Path, users: int) -> dict:
    """The cold start and the herd (``tools/bench/cold_shape.py``) on a stage just started."""
    slug = running.stage.slug
    out = raw / f"stage{slug}-cold.json"
    out.unlink(missing_ok=True)
    servers = [pid for pids in tiers_of(running).values() for pid in pids]
    env = {**os.environ, **cold_environment(plan, out, servers, users)}
    files = "locustfile.py,tools/bench/cold_shape.py"
    command = locust_command(plan, files, running.url, raw / f"stage{slug}-cold", None, cold_time_limit(plan))
    with open(raw / f"stage{slug}-cold-locust.log", "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        ends, shown = time.monotonic() + cold_time_limit(plan) + 60, None
        while process.poll() is None and time.monotonic() < ends:
            time.sleep(2)
            line = cold_progress_line(running.stage.label, out)
            if line and line != shown:
                say(line)
                shown = line
        if process.poll() is None:
            process.kill()
        process.wait()
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        return {"state": "crashed", "users": users}
    return {**data, "state": "complete" if data.get("state") == "done" else "cut short"}


def cold_progress_line(label: str, out: Path) -> str | None:
    try:
        p = json.loads(out.read_text())
    except (OSError, ValueError):
        return None
    return f"  stage {label} · cold start · {p['phase']} {p['seconds_in_phase']}s · {p['users']} users"


def cold_line(label: str, cold: dict) -> str:
    """One line of what the cold start and the herd showed."""
    summary, herd = cold.get("cold"), cold.get("herd_figures")
    if not summary:
        return f"  stage {label}: cold start {cold.get('state')}: no window measured"
    line = (
        f"  stage {label}: cold start at {cold['users']} users: {summary['windows_met']}/{summary['windows']} windows "
        f"met the bar, {summary['rps']['median']} QPS ({summary['rps']['min']}-{summary['rps']['max']})"
    )
    if herd:
        back = herd["recovered_after_s"]
        line += (
            f"; herd of {cold['herd']['users']}: {herd['goodput_pct_of_capacity']}% of the tasks, "
            f"back under the bar {'after ' + str(back) + ' s' if back is not None else 'never, in the time given'}"
        )
    return line


def search_outcome(out: Path, exit_code: int | None, servers_alive: bool, log_name: str) -> dict:
    """The shape's results, and what kept the search from its end when something did."""
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        return {
            "steps": [],
            "overload": None,
            "search": {
                "state": "crashed",
                "note": f"locust exited with code {exit_code} and wrote no results ({log_name})",
            },
        }
    search = {"state": "complete" if data.get("state") == "done" else "cut short", "ended": data.get("ended", "")}
    if search["state"] != "complete":
        p = data.get("progress") or {}
        where = f"in the {p.get('phase', '?')} of step {p.get('step', '?')} ({p.get('target_users', '?')} users)"
        cause = "a server exited" if not servers_alive else f"locust exited with code {exit_code}"
        search["note"] = f"{cause} {where}; see {log_name}"
    return {"steps": data.get("steps", []), "overload": data.get("overload"), "search": search}


def progress_line(label: str, out: Path) -> str | None:
    try:
        p = json.loads(out.read_text())["progress"]
    except (OSError, ValueError, KeyError):
        return None
    if not p:
        return None
    step = "overload step" if p["step"] == "overload" else f"step {p['step']}/{p['of_steps']}"
    return (
        f"  stage {label} · {step} · {p['phase']} {p['seconds_in_phase']}s · "
        f"{p['users']}/{p['target_users']} users · {p['rps']} rps · p95 {p['p95_ms'] or 0:.0f} ms · "
        f"{p['failures']} failures"
    )


# --- one stage -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(plan: Plan, stage: stages.Stage, master: Path):
    """The stage started afresh, as ``make run`` would, on a fresh copy of the bench's data and empty
    caches: yields its ``Running`` and, with ``TWEEPY_BENCH_NETWORK_DELAY_MS``, its relays' figures."""
    seed = None
    if stage.app_setting("DATABASE_URL").startswith("postgresql"):
        # The same data, seeded anew (COPY) into a database of the bench's own on the stage's server.
        database_url = services.recreate_database(stage.app_setting("DATABASE_URL"), "tweepy_bench")
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


def bench_stage(plan: Plan, stage: stages.Stage, master: Path, raw: Path, bound: dict) -> dict:
    label = stage.label
    say(f"stage {label}: fresh database, starting the servers")
    with served(plan, stage, master) as (running, network):
        ceiling = measure_ceiling(plan, running, raw)
        bound_text = f" (a lower bound: {ceiling['why']})" if ceiling["lower_bound"] else ""
        say(
            f"  stage {label}: stack ceiling {ceiling['rps']} requests/s{bound_text}, {ceiling['failures']} failures "
            f"(GET /healthz, {plan.ceiling_users} users, no think time)"
        )
        searched = measure_capacity(plan, running, raw, bound)
    steps = searched["steps"]
    best = max((s for s in steps if s.get("met_bar")), key=lambda s: s["users"], default=None)
    result = {
        **identity(stage),
        "server": stage.server,
        "processes": stage.nodes * stage.processes if stage.server == "uwsgi" else 1,
        "nodes": stage.nodes if stage.server == "uwsgi" else 1,
        "processes_setting": stage.get("PROCESSES") if stage.server == "uwsgi" else "1",
        "ceiling": ceiling,
        "ceiling_rps": ceiling["rps"],
        **searched,
        "best": best,
        **({"network": network} if network else {}),
    }
    search = searched["search"]
    say(f"  stage {label}: search {search['state']}: {search.get('note') or search.get('ended', '')}")
    if best:
        say(
            f"  stage {label}: {best['rps']} QPS at {best['users']} users, p95 {best['p95_ms']} ms "
            f"(slowest {best['slowest']} {best['slowest_p95_ms']} ms), "
            f"{best['server_cpu_ms_per_request']} ms of server CPU a request"
        )
    else:
        say(f"  stage {label}: no step met the bar")
    if best and plan.cold_windows:
        say(f"  stage {label}: started afresh for the cold start: {best['users']} users at {plan.cold_rate:g} a second")
        with served(plan, stage, master) as (running, _):
            result["cold_start"] = measure_cold_start(plan, running, raw, best["users"])
        say(cold_line(label, result["cold_start"]))
    if searched["overload"]:
        o = searched["overload"]
        say(
            f"  stage {label}: overload at {o['users']} users: goodput {o['goodput_rps']} requests/s "
            f"({o['goodput_pct_of_capacity']}% of capacity), failures {100 * (o['failure_share'] or 0):.1f}%, "
            f"max {o['max_ms']} ms"
        )
    return result


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


def identity(stage: stages.Stage) -> dict:
    """Which stage, or part of a step, a result is: its number, name (with the part's) and settings."""
    name = f"{stage.name}, {stage.part}" if stage.part else stage.name
    return {"stage": stage.number, "name": name, "part": stage.part, "settings": stage.settings}


def crashed_stage(stage: stages.Stage, error: BaseException) -> dict:
    """A stage that could not be measured at all, reported as such instead of stopping the run."""
    first_line = (str(error).strip().splitlines() or [""])[0][:200]
    note = f"{type(error).__name__}: {first_line}"
    return {
        **identity(stage),
        "server": stage.server,
        "ceiling": {"rps": None, "lower_bound": None, "failures": None},
        "steps": [],
        "overload": None,
        "best": None,
        "search": {"state": "crashed", "note": note},
    }
