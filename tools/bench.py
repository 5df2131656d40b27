"""``make bench``: every stage measured with the locust protocol, then a table and a chart.

    python -m tools.bench                      all stages, full size (10,000 users, 1,000,000 tweets)
    python -m tools.bench --stages "4 5 6"     some stages
    python -m tools.bench --quick              a smoke run: tiny data, one short step per stage

Sizes and steps are settings: TWEEPY_BENCH_USERS, TWEEPY_BENCH_TWEETS,
TWEEPY_BENCH_FOLLOWS, TWEEPY_BENCH_STEPS ("25 50 100"), TWEEPY_BENCH_WINDOW
(seconds), LOCUST_PROCESSES, TWEEPY_BCRYPT_LOG_ROUNDS (default 12).

For each stage: a fresh copy of one seeded database, the stage started as
``make run`` would, the ceiling of its stack measured (the same load generator
asking for ``/healthz`` as fast as it can), then the capacity search of
``tools/bench_shape.py``. Before the stages, the bcrypt bound: how many hashes a
second the machine can do at the configured cost, and what protocol QPS that
alone allows (3 of every 238 requests hash a password).

Results go to ``results/<date>-<host>/`` (``results.json``, ``RESULTS.md``,
``chart.png``, raw locust CSVs under ``raw/``); ``results/LATEST.md`` and the
top-level README show the newest. Quick runs write under ``var/bench/`` only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import bcrypt

from tools import stages

ROOT = stages.ROOT
RESULTS = ROOT / "results"
STAGES_README = stages.STAGES / "README.md"
WORK = stages.VAR / "bench"
HASHES_PER_238 = 3  # register 1 + log out and in 2, per 238 requests of the protocol
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


@dataclass
class Plan:
    stages: list[int]
    users: int = 10_000
    tweets: int = 1_000_000
    follows: int = 20
    steps: tuple[int, ...] = (25, 50, 100, 200, 300, 400, 600, 800, 1000, 1200)
    window_s: float = 60
    warmup_s: float = 10
    ceiling_s: float = 15
    ceiling_users: int = 50
    bcrypt_cost: int = 12
    bcrypt_probe_s: float = 5
    ramp_limit_s: float = 600  # a step whose users are not all logged in by then has missed the bar
    locust_processes: int = 1
    quick: bool = False

    @classmethod
    def quick_plan(cls, stage_numbers: list[int]) -> Plan:
        return cls(
            stages=stage_numbers, users=200, tweets=5_000, follows=10, steps=(5,), window_s=3,
            warmup_s=1, ceiling_s=2, ceiling_users=10, bcrypt_probe_s=1, ramp_limit_s=60, quick=True,
        )


# --- the bcrypt bound ----------------------------------------------------------------------


def _hash_for(args: tuple[int, float]) -> int:
    cost, seconds = args
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline or count == 0:
        bcrypt.hashpw(b"tweepy123", bcrypt.gensalt(cost))
        count += 1
    return count


def bcrypt_bound(cost: int, seconds: float) -> dict:
    """Hashes a second with every core hashing, and the protocol QPS that allows."""
    cores = len(os.sched_getaffinity(0))
    started = time.monotonic()
    with multiprocessing.Pool(cores) as pool:
        hashes = sum(pool.map(_hash_for, [(cost, seconds)] * cores))
    elapsed = time.monotonic() - started
    per_second = hashes / elapsed
    return {
        "cost": cost,
        "cores": cores,
        "hashes_per_s": round(per_second, 2),
        "cpu_ms_per_hash": round(1000 * cores / per_second, 1),
        "protocol_qps_bound": round(per_second * 238 / HASHES_PER_238, 1),
    }


# --- the database ----------------------------------------------------------------------------


def seeded_master(plan: Plan) -> Path:
    """One seeded database per size, made once and copied for every stage."""
    master = WORK / f"seed-u{plan.users}-t{plan.tweets}-f{plan.follows}-c{plan.bcrypt_cost}.sqlite3"
    if master.exists():
        return master
    WORK.mkdir(parents=True, exist_ok=True)
    making = master.with_suffix(".making")
    making.unlink(missing_ok=True)
    env = {**os.environ, "TWEEPY_DATABASE_URL": f"sqlite:///{making}", "TWEEPY_BCRYPT_LOG_ROUNDS": str(plan.bcrypt_cost)}
    flask = [str(stages.BIN / "flask"), "--app", "tweepy"]
    say(f"seeding {plan.users} users, {plan.tweets} tweets, {plan.follows} follows each into {master.name}")
    subprocess.run([*flask, "db", "upgrade"], env=env, cwd=ROOT, check=True, capture_output=True)
    subprocess.run(
        [*flask, "seed", "--users", str(plan.users), "--tweets", str(plan.tweets), "--follows", str(plan.follows)],
        env=env, cwd=ROOT, check=True,
    )
    making.rename(master)
    return master


def fresh_copy(master: Path, target: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(master, target)
    return target


# --- locust ------------------------------------------------------------------------------------


def locust_command(plan: Plan, files: str, url: str, csv: Path, users: int | None, run_time: float) -> list[str]:
    # No trailing slash: locust joins the host and "/tweets/" itself.
    command = [str(stages.BIN / "locust"), "-f", files, "--headless", "-H", url.rstrip("/"), "--csv", str(csv), "--only-summary"]
    command += ["--run-time", f"{int(run_time)}s", "--stop-timeout", "5", "--loglevel", "WARNING"]
    if users is not None:
        command += ["-u", str(users), "-r", str(users)]
    if plan.locust_processes > 1:
        command += ["--processes", str(plan.locust_processes)]
    return command


def aggregated_rps(csv: Path) -> float:
    import csv as csv_module

    with open(f"{csv}_stats.csv", newline="") as f:
        for row in csv_module.DictReader(f):
            if row["Name"] == "Aggregated":
                return round(float(row["Requests/s"]), 1)
    raise RuntimeError(f"no Aggregated row in {csv}_stats.csv")


def measure_ceiling(plan: Plan, running: stages.Running, raw: Path) -> float:
    csv = raw / f"stage{running.stage.number}-ceiling"
    command = locust_command(plan, "tools/ceiling_locustfile.py", running.url, csv, plan.ceiling_users, plan.ceiling_s)
    subprocess.run(command, cwd=ROOT, check=False, capture_output=True, timeout=plan.ceiling_s + 60)
    return aggregated_rps(csv)


def measure_capacity(plan: Plan, running: stages.Running, raw: Path) -> list[dict]:
    number = running.stage.number
    out = raw / f"stage{number}-steps.json"
    out.unlink(missing_ok=True)
    spawn_rate = max(1.0, round(0.5 * plan.bound["hashes_per_s"], 1))  # half the machine hashes first logins
    env = {
        **os.environ,
        "TWEEPY_SEED_USERS": str(plan.users),
        "TWEEPY_BENCH_STEPS": " ".join(map(str, plan.steps)),
        "TWEEPY_BENCH_SPAWN_RATE": str(spawn_rate),
        "TWEEPY_BENCH_WINDOW": str(plan.window_s),
        "TWEEPY_BENCH_WARMUP": str(plan.warmup_s),
        "TWEEPY_BENCH_OUT": str(out),
        "TWEEPY_BENCH_RAMP_LIMIT": str(plan.ramp_limit_s),
        "TWEEPY_BENCH_SERVER_PIDS": " ".join(str(p.pid) for _, p in running.children),
    }
    longest_ramp = max(plan.steps) / spawn_rate + 120
    run_time = len(plan.steps) * (plan.window_s + 30) + plan.warmup_s + longest_ramp * 2
    command = locust_command(plan, "locustfile.py,tools/bench_shape.py", running.url, raw / f"stage{number}", None, run_time)
    log = open(raw / f"stage{number}-locust.log", "wb")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    shown = None
    try:
        while process.poll() is None:
            time.sleep(2)
            line = progress_line(number, out)
            if line and line != shown:
                say(line)
                shown = line
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if not out.exists():
        raise RuntimeError(f"stage {number}: locust wrote no results (see {log.name})")
    return json.loads(out.read_text())["steps"]


def progress_line(number: int, out: Path) -> str | None:
    try:
        p = json.loads(out.read_text())["progress"]
    except (OSError, ValueError, KeyError):
        return None
    if not p:
        return None
    return (
        f"  stage {number} · step {p['step']}/{p['of_steps']} · {p['phase']} {p['seconds_in_phase']}s · "
        f"{p['users']}/{p['target_users']} users · {p['rps']} rps · p95 {p['p95_ms'] or 0:.0f} ms · "
        f"{p['failures']} failures"
    )


# --- one stage -----------------------------------------------------------------------------------


def bench_stage(plan: Plan, number: int, master: Path, raw: Path) -> dict:
    stage = stages.get_stage(number)
    say(f"stage {number} ({stage.name}): fresh database, starting the servers")
    database = fresh_copy(master, WORK / "bench.sqlite3")
    env = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{database}",
        "TWEEPY_INSTANCE_PATH": str(WORK / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": str(plan.bcrypt_cost),
    }
    var = WORK / f"stage{number}"
    shutil.rmtree(var, ignore_errors=True)
    with stages.start(stage, port=stages.free_port(), var=var, env=env) as running:
        ceiling = measure_ceiling(plan, running, raw)
        say(f"  stage {number}: stack ceiling {ceiling} requests/s (GET /healthz, {plan.ceiling_users} users, no think time)")
        steps = measure_capacity(plan, running, raw)
    best = max((s for s in steps if s.get("met_bar")), key=lambda s: s["users"], default=None)
    result = {
        "stage": number,
        "name": stage.name,
        "settings": stage.settings,
        "processes": stage.processes if stage.server == "uwsgi" else 1,
        "ceiling_rps": ceiling,
        "steps": steps,
        "best": best,
    }
    if best:
        result["pct_of_ceiling"] = round(100 * best["rps"] / ceiling, 1) if ceiling else None
        result["pct_of_bcrypt_bound"] = round(100 * best["rps"] / plan.bound["protocol_qps_bound"], 1)
        say(f"  stage {number}: {best['rps']} QPS at {best['users']} users, p95 {best['p95_ms']} ms, "
            f"{best['server_cpu_ms_per_request']} ms of server CPU a request")
    else:
        say(f"  stage {number}: no step met the bar")
    return result


# --- reports ---------------------------------------------------------------------------------------


def machine() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
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


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def markdown(report: dict) -> str:
    m, plan, bound = report["machine"], report["plan"], report["bcrypt"]
    lines = [
        f"# tweepy benchmark, {report['date']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, Python {m['python']}; "
        f"the load generator (locust, {plan['locust_processes']} process(es)) runs on the same machine.",
        f"Data: {plan['users']:,} users, {plan['tweets']:,} tweets, {plan['follows']} follows each. "
        f"bcrypt cost {bound['cost']}. Window {plan['window_s']:g} s a step, after every user has logged in. "
        f"Bar: p95 < 2000 ms and no failed request. Commit {report['commit']}.",
        "",
        f"bcrypt bound: {bound['hashes_per_s']} hashes/s on {bound['cores']} cores "
        f"({bound['cpu_ms_per_hash']} ms of CPU a hash), so at most {bound['protocol_qps_bound']} QPS of the protocol "
        f"(3 hashes per 238 requests) if the machine did nothing else.",
        "",
        "| stage | users | QPS at the bar | p95 ms | server CPU ms/req | peak server MiB | % of stack ceiling | % of bcrypt bound | generator CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    earlier_runs = set()
    for r in report["stages"]:
        b = r["best"]
        run = r.get("run")
        if run and run["commit"] != report["commit"]:
            earlier_runs.add(f"{run['date']}, commit {run['commit']}")
            r = {**r, "name": r["name"] + " †"}
        if not b:
            lines.append(f"| {r['stage']} {r['name']} | — | missed at {r['steps'][0]['users'] if r['steps'] else '?'} users | | | | | | |")
            continue
        lines.append(
            f"| {r['stage']} {r['name']} | {b['users']} | **{b['rps']}** | {b['p95_ms']:.0f} | {b['server_cpu_ms_per_request']} "
            f"| {b['peak_server_memory_mb']:.0f} | {r['pct_of_ceiling']}% of {r['ceiling_rps']:.0f} | {r['pct_of_bcrypt_bound']}% "
            f"| {100 * b['generator_cpu_share']:.0f}% |"
        )
    if earlier_runs:
        lines += ["", f"† kept from an earlier run on the same machine and data ({'; '.join(sorted(earlier_runs))})."]
    lines += [
        "",
        "Ramps, reported apart from the windows: how long each step took to log its new users in (at about half "
        "the machine's hashing rate) and how slow those first logins were. The windows still contain the "
        "protocol's own logins.",
        "",
        "| stage | steps: users (ramp s, first-login p95 ms) |",
        "|---|---|",
    ]
    for r in report["stages"]:
        ramps = ", ".join(
            f"{s['users']} ({s.get('ramp_s', '—')} s, {s.get('login_p95_ms') or '—'} ms)" for s in r["steps"]
        )
        lines.append(f"| {r['stage']} {r['name']} | {ramps} |")
    lines += [
        "",
        "QPS at the bar: requests a second in the measured window of the highest step (users) that met the bar. "
        "Server CPU: user + system time of the dev server, or of nginx and uWSGI with all their processes, "
        "divided by the requests served. Stack ceiling: the same generator asking the stage's servers for `/healthz` "
        "with no think time. Generator CPU: the load generator's share of the whole machine.",
        "",
        "![QPS per stage](chart.png)",
        "",
    ]
    return "\n".join(lines)


def chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["stages"]
    fig, (ladder, curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['stage']}\n{r['name']}" for r in results]
    qps = [r["best"]["rps"] if r["best"] else 0 for r in results]
    p95 = [r["best"]["p95_ms"] if r["best"] else None for r in results]
    ladder.bar(labels, qps, color="#1d7fc4")
    ladder.tick_params(axis="x", labelsize=8)
    ladder.set_ylabel("QPS meeting the bar")
    ladder.set_title("The ladder")
    for x, value in enumerate(qps):
        ladder.annotate(f"{value:.0f}", (x, value), ha="center", va="bottom", fontsize=9)
    latency = ladder.twinx()
    latency.plot(labels, [v if v is not None else float("nan") for v in p95], color="#c0392b", marker="o")
    latency.set_ylabel("p95 ms at that step", color="#c0392b")

    top = max(results, key=lambda r: r["best"]["rps"] if r["best"] else -1)
    steps = [s for s in top["steps"] if "rps" in s]
    curve.plot([s["users"] for s in steps], [s["rps"] for s in steps], color="#1d7fc4", marker="o")
    curve.set_xlabel("users")
    curve.set_ylabel("requests/s")
    curve.set_title(f"Stage {top['stage']} ({top['name']}): load against users")
    latency = curve.twinx()
    latency.plot([s["users"] for s in steps], [s["p95_ms"] for s in steps], color="#c0392b", marker="o")
    latency.axhline(2000, color="#c0392b", linestyle=":", linewidth=1)
    latency.set_ylabel("p95 ms (dotted: the bar)", color="#c0392b")
    fig.suptitle(
        f"tweepy on {report['machine']['cores']} cores, bcrypt cost {report['bcrypt']['cost']}, {report['date']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replace_block(path: Path, block: str) -> None:
    """Put ``block`` between the bench markers of a Markdown file (appending them if missing)."""
    text = path.read_text()
    if README_START not in text:
        text = text.rstrip() + f"\n\n{README_START}\n{README_END}\n"
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(f"{head}{README_START}\n{block.strip()}\n{README_END}{tail}")


def stage_figures(report: dict, result: dict, link: str) -> str:
    """A stage README's "Measured" section, from one run."""
    b, m = result["best"], report["machine"]
    where = f"{m['cores']} cores ({m['cpu']}), bcrypt cost {report['bcrypt']['cost']}, {report['plan']['users']:,} users and {report['plan']['tweets']:,} tweets seeded, run of {report['date']}"
    if not b:
        return f"## Measured\n\nNo step met the bar ({where}; [all figures]({link})).\n"
    return (
        f"## Measured\n\n**{b['rps']} QPS** at {b['users']} locust users with p95 {b['p95_ms']:.0f} ms and no failed request; "
        f"{b['server_cpu_ms_per_request']} ms of server CPU a request; peak server memory {b['peak_server_memory_mb']:.0f} MiB; "
        f"{result['pct_of_ceiling']}% of this stack's ceiling ({result['ceiling_rps']:.0f} requests/s on `/healthz`), "
        f"{result['pct_of_bcrypt_bound']}% of the bcrypt bound. On {where}; [all figures]({link}).\n"
    )


def publish(report: dict, folder: Path) -> None:
    """results/LATEST.md, the README, stages/README.md and each stage's README show this run."""
    relative = folder.relative_to(RESULTS)
    table = (folder / "RESULTS.md").read_text().split("\n", 2)[2]
    (RESULTS / "LATEST.md").write_text(
        f"# Latest benchmark: [{relative}]({relative}/RESULTS.md)\n\n" + table.replace("(chart.png)", f"({relative}/chart.png)")
    )
    replace_block(ROOT / "README.md", table.replace("(chart.png)", f"(results/{relative}/chart.png)"))
    ladder = ["| stage | QPS at the bar | users | p95 ms | server CPU ms/req |", "|---|---|---|---|---|"]
    for result in report["stages"]:
        stage = stages.get_stage(result["stage"])
        b = result["best"]
        ladder.append(
            f"| {stage.folder.name} | **{b['rps']}** | {b['users']} | {b['p95_ms']:.0f} | {b['server_cpu_ms_per_request']} |"
            if b else f"| {stage.folder.name} | missed at the first step | | | |"
        )
        replace_block(stage.folder / "README.md", stage_figures(report, result, f"../../results/{relative}/RESULTS.md"))
    replace_block(
        STAGES_README,
        f"Measured by `make bench` on {report['machine']['cores']} cores, bcrypt cost {report['bcrypt']['cost']}, "
        f"{report['date']} ([details](../results/{relative}/RESULTS.md)):\n\n" + "\n".join(ladder),
    )


def write_reports(report: dict, folder: Path, publish_it: bool) -> None:
    (folder / "RESULTS.md").write_text(markdown(report))
    chart(report, folder / "chart.png")
    if publish_it:
        publish(report, folder)


def say(message: str) -> None:
    print(f"==> {message}" if not message.startswith("  ") else message, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--stages", default="", help='stage numbers, e.g. "4 5 6" (default: all)')
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny data, one short step per stage")
    parser.add_argument("--out", type=Path, help="write the report here instead of results/<date>-<host>/")
    parser.add_argument("--keep-from", type=Path, metavar="FOLDER", help="take the stages not run now from an earlier run's results.json")
    parser.add_argument("--report", type=Path, metavar="FOLDER", help="only redo the table, chart and READMEs from FOLDER/results.json")
    args = parser.parse_args(argv)
    if args.report:
        folder = args.report.resolve()
        write_reports(json.loads((folder / "results.json").read_text()), folder, publish_it=folder.is_relative_to(RESULTS))
        return 0

    numbers = [int(n) for n in args.stages.replace(",", " ").split()] or [s.number for s in stages.all_stages()]
    plan = Plan.quick_plan(numbers) if args.quick else Plan(stages=numbers)
    plan.window_s = float(os.environ.get("TWEEPY_BENCH_WINDOW", plan.window_s))
    if os.environ.get("TWEEPY_BENCH_STEPS"):
        plan.steps = tuple(int(n) for n in os.environ["TWEEPY_BENCH_STEPS"].replace(",", " ").split())
    plan.locust_processes = int(os.environ.get("LOCUST_PROCESSES", "1"))
    if not args.quick:
        plan.users = int(os.environ.get("TWEEPY_BENCH_USERS", plan.users))
        plan.tweets = int(os.environ.get("TWEEPY_BENCH_TWEETS", plan.tweets))
        plan.follows = int(os.environ.get("TWEEPY_BENCH_FOLLOWS", plan.follows))
    plan.bcrypt_cost = int(os.environ.get("TWEEPY_BCRYPT_LOG_ROUNDS", plan.bcrypt_cost))

    now = datetime.now(timezone.utc)
    folder = args.out or (WORK / "quick" if args.quick else RESULTS / f"{now:%Y-%m-%d-%H%M}-{socket.gethostname()}")
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    say(f"bcrypt bound at cost {plan.bcrypt_cost}: hashing on every core for {plan.bcrypt_probe_s:g}s")
    plan.bound = bcrypt_bound(plan.bcrypt_cost, plan.bcrypt_probe_s)
    say(f"  {plan.bound['hashes_per_s']} hashes/s: the protocol alone can reach {plan.bound['protocol_qps_bound']} QPS")
    master = seeded_master(plan)

    report = {
        "date": f"{now:%Y-%m-%d %H:%M} UTC",
        "commit": git_commit(),
        "machine": machine(),
        "plan": {k: v for k, v in asdict(plan).items()},
        "bcrypt": plan.bound,
        "stages": [],
    }
    this_run = {"date": report["date"], "commit": report["commit"]}
    if args.keep_from:
        earlier = json.loads((args.keep_from / "results.json").read_text())
        report["stages"] = [
            {**r, "run": r.get("run", {"date": earlier["date"], "commit": earlier["commit"]})}
            for r in earlier["stages"] if r["stage"] not in plan.stages
        ]
    for number in plan.stages:
        report["stages"].append({**bench_stage(plan, number, master, raw), "run": this_run})
        report["stages"].sort(key=lambda r: r["stage"])
        (folder / "results.json").write_text(json.dumps(report, indent=1))

    write_reports(report, folder, publish_it=not args.quick and args.out is None)
    say(f"done: {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
