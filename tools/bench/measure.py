"""What a bench run measures on each stage: the ceiling of its stack, its capacity search
(``capacity_shape`` inside locust) with the overload step, and, started afresh, its cold
start and herd (``cold_shape``)."""

from __future__ import annotations

import contextlib
import csv as csv_module
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tools import services, stages
from tools.bench.cold_report import herd_cells
from tools.bench.machine import ROOT, say
from tools.bench.plan import (
    COLD_FILES,
    Plan,
    cold_environment,
    cold_starts,
    cold_time_limit,
    locust_command,
    search_time_limit,
    shape_environment,
    spawn_rate,
)
from tools.bench.procfs import cpu_seconds, process_tree
from tools.bench.runs import judge_capacity, served_text, spread_text
from tools.bench.serving import served

# The generator is the ceiling's bottleneck when its processes are this busy, or the whole machine is.
BUSY = 0.9


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


@contextlib.contextmanager
def started(command: list[str], **popen) -> Iterator[subprocess.Popen]:
    """``command`` running from the repository's root for the block, and killed if it still runs at its
    end, however the block ends: an error, Ctrl-C or SIGTERM leaves no load generator behind."""
    process = subprocess.Popen(command, cwd=ROOT, **popen)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def measure_ceiling(plan: Plan, running: stages.Running, raw: Path) -> dict:
    csv = raw / f"stage{running.stage.slug}-ceiling"
    files = "tools/bench/ceiling_locustfile.py"
    command = locust_command(plan, files, running.url, csv, plan.ceiling_users, plan.ceiling_s)
    with started(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        # CPU shares are sampled inside the run, past locust's start-up (imports, spawning users).
        time.sleep(min(2.0, plan.ceiling_s / 2))
        first = _cpu_of(process.pid, running)
        time.sleep(max(0.5, plan.ceiling_s - min(2.0, plan.ceiling_s / 2) - 0.5))
        last = _cpu_of(process.pid, running)
        process.wait(timeout=plan.ceiling_s + 60)
    seconds = last["time"] - first["time"]
    generator_cores = (last["generator"] - first["generator"]) / seconds
    server_cores = (last["server"] - first["server"]) / seconds
    figures = aggregated(csv)
    cores = len(os.sched_getaffinity(0))
    ceiling = {
        **ceiling_verdict(figures["rps"], generator_cores, server_cores, plan.locust_processes, cores),
        "requests": figures["requests"],
        "failures": figures["failures"],
        "users": plan.ceiling_users,
        "generator_cpu_cores": round(generator_cores, 2),
        "server_cpu_cores": round(server_cores, 2),
    }
    Path(f"{csv}.json").write_text(json.dumps(ceiling))  # kept with the raw data (tools/bench/raw.py)
    return ceiling


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
    with open(log_path, "wb") as log, started(command, env=env, stdout=log, stderr=subprocess.STDOUT) as process:
        shown = None
        while process.poll() is None:
            time.sleep(2)
            line = progress_line(label, out)
            if line and line != shown:
                say(line)
                shown = line
            if not running.alive():
                say(f"  stage {label}: a server exited during the search")
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
    return search_outcome(out, process.returncode, running.alive(), log_path.name)


def measure_cold_start(plan: Plan, running: stages.Running, raw: Path, users: int, name: str = "cold") -> dict:
    """The cold start and the herd (``tools/bench/cold_shape.py``) on a stage just started."""
    slug = running.stage.slug
    out = raw / f"stage{slug}-{name}.json"
    out.unlink(missing_ok=True)
    servers = [pid for pids in tiers_of(running).values() for pid in pids]
    env = {**os.environ, **cold_environment(plan, out, servers, users)}
    files = "locustfile.py,tools/bench/cold_shape.py"
    command = locust_command(plan, files, running.url, raw / f"stage{slug}-{name}", None, cold_time_limit(plan))
    log_path = raw / f"stage{slug}-{name}-locust.log"
    with open(log_path, "wb") as log, started(command, env=env, stdout=log, stderr=subprocess.STDOUT) as process:
        ends, shown = time.monotonic() + cold_time_limit(plan) + 60, None
        while process.poll() is None and time.monotonic() < ends:
            time.sleep(2)
            line = cold_progress_line(running.stage.label, out)
            if line and line != shown:
                say(line)
                shown = line
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
        goodput, back = herd_cells(herd)
        line += f"; herd of {cold['herd']['users']}: {goodput} of the tasks, back under the bar: {back}"
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
    # The shape's own capacity is judged again, with the same function, from the steps (``judge_capacity``).
    return {"steps": data.get("steps", []), "overload": data.get("overload"), "search": search}


def progress_line(label: str, out: Path) -> str | None:
    try:
        p = json.loads(out.read_text())["progress"]
    except (OSError, ValueError, KeyError):
        return None
    if not p:
        return None
    named = {"overload": "overload step", "capacity": "capacity step, measured again"}
    step = named.get(p["step"]) or f"step {p['step']}/{p['of_steps']}"
    return (
        f"  stage {label} · {step} · {p['phase']} {p['seconds_in_phase']}s · "
        f"{p['users']}/{p['target_users']} users · {p['rps']} rps · p95 {p['p95_ms'] or 0:.0f} ms · "
        f"{p['failures']} failures"
    )


# --- one stage -------------------------------------------------------------------------------------------


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
    result = {
        **identity(stage),
        "server": stage.server,
        "processes": stage.nodes * stage.processes if stage.server == "uwsgi" else 1,
        "nodes": stage.nodes if stage.server == "uwsgi" else 1,
        "processes_setting": stage.get("PROCESSES") if stage.server == "uwsgi" else "1",
        "ceiling": ceiling,
        "ceiling_rps": ceiling["rps"],
        **searched,
        **({"network": network} if network else {}),
    }
    judge_capacity(result, plan.bar)
    best, capacity = result["best"], result["capacity"]
    search = searched["search"]
    say(f"  stage {label}: search {search['state']}: {search.get('note') or search.get('ended', '')}")
    if capacity:
        say(
            f"  stage {label}: {capacity['rps']['median']} QPS at {capacity['users']} users ({spread_text(capacity)}), "
            f"p95 {capacity['p95_ms']} ms (slowest {capacity['slowest']} {capacity['slowest_p95_ms']} ms), "
            f"{capacity['server_cpu_ms_per_request'].get('median')} ms of server CPU a request"
        )
    else:
        say(f"  stage {label}: no step met the bar")
    for key, users in (cold_starts(plan, stage, best["users"], bound) if best else {}).items():
        say(f"  stage {label}: started afresh for the cold start: {users} users at {plan.cold_rate:g} a second")
        with served(plan, stage, master) as (running, _):
            result[key] = measure_cold_start(plan, running, raw, users, COLD_FILES[key])
        say(cold_line(label, result[key]))
    if searched["overload"]:
        o = searched["overload"]
        say(
            f"  stage {label}: overload at {o['users']} users: goodput {o.get('goodput_tasks_per_s')} tasks/s "
            f"({o.get('goodput_pct_of_capacity')}% of capacity's), {served_text(o)} users served, "
            f"failures {100 * (o['failure_share'] or 0):.1f}%, max {o['max_ms']} ms"
        )
    return result


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
