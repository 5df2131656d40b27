"""``make profile STAGE=N``: where a stage's CPU goes under the protocol, as a flame graph and a table.

    python -m tools.profile 6                          200 users for 60 s, the bench's data
    python -m tools.profile 6 --users 300 --seconds 90
    python -m tools.profile 7 --part stores             one part of a step (stages/N-name/part-<name>.env)

The stage is served as ``make bench`` serves it (its own seeded database, empty caches), locust runs
the protocol, and once every user has logged in py-spy samples every worker of every node for the
second half of the run. Written to ``results/profiles/<date>-stage<N>[-<part>]/``: ``flame.svg``
(the first node's flame graph), ``top.txt`` (the functions that took the CPU outside bcrypt on every
node, and how many samples hashed or idled) and ``summary.md`` (the server's CPU a request, bcrypt
apart and tier by tier; how long the app's other threads ran and waited for a core, both of which
py-spy counts as busy; and the locust figures).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from tools import stages
from tools.bench import machine, serving
from tools.bench.figures import cpu_ms_per_hash
from tools.bench.measure import tiers_of
from tools.bench.plan import make_plan
from tools.bench.procfs import cpu_seconds, process_tree, run_and_wait_seconds, thread_cpu_seconds
from tools.protocol import FIRST_LOGIN_KEY, LOG_IN, REGISTER
from tweepy.hashing_threads import HASHING_THREAD

RESULTS = stages.ROOT / "results" / "profiles"
# Leaf frames of a thread waiting, not working. A hashing thread's leaf is its loop only while it waits
# for its bell (a native queue's get, which py-spy does not see as idle): its work shows as its callees.
IDLE = ("Hub.run", "Hub.wait", "_wait", "wait (", "select (", "poll (", "epoll", "HashingThreads._serve (")


def busy_functions(collapsed_lines) -> tuple[Counter, Counter, dict]:
    """Inclusive and self samples per function, busy and outside bcrypt, from py-spy's collapsed stacks."""
    inclusive, own, counts = Counter(), Counter(), {"busy": 0, "hashing": 0, "idle": 0}
    for line in collapsed_lines:
        line = line.rstrip()
        if not line or " " not in line:
            continue
        stack, samples = line.rsplit(" ", 1)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames or frames[-1].startswith(IDLE):
            counts["idle"] += int(samples)
        elif any("crypt" in frame.lower() for frame in frames):  # bcrypt, libxcrypt's _crypt, legacycrypt
            counts["hashing"] += int(samples)
        else:
            counts["busy"] += int(samples)
            own[frames[-1]] += int(samples)
            for frame in set(frames):
                inclusive[frame] += int(samples)
    return inclusive, own, counts


def app_servers(children: list[tuple[str, subprocess.Popen]]) -> list[int]:
    """The pids py-spy samples: every app server's root (uWSGI's master of each node, or run.py), not nginx."""
    return [process.pid for name, process in children if name != "nginx"]


def py_spy(pid: int) -> list[str]:
    """py-spy recording ``pid`` and its children (uWSGI's workers), without pausing them."""
    return [str(stages.BIN / "py-spy"), "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--rate", "100"]


def record_stacks(pids: list[int], seconds: int, out: Path, flame: Path | None = None) -> None:
    """Every server in ``pids`` sampled over the same ``seconds``, their collapsed stacks in one file; and,
    given ``flame``, the first one's flame graph drawn from those same seconds (py-spy writes one format
    a recording, so a second recorder samples it alongside)."""
    parts = [out.with_name(f"{out.stem}-{pid}{out.suffix}") for pid in pids]
    outputs = [(pid, "raw", part) for pid, part in zip(pids, parts, strict=True)]
    if flame:
        outputs.append((pids[0], "flamegraph", flame))
    recorders = [
        subprocess.Popen([*py_spy(pid), "--duration", str(seconds), "--format", form, "-o", str(path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for pid, form, path in outputs
    ]  # fmt: skip
    for recorder in recorders:
        recorder.wait(timeout=seconds + 60)
    out.write_text("".join(part.read_text() for part in parts if part.exists()))
    for part in parts:
        part.unlink(missing_ok=True)


def top_table(inclusive: Counter, own: Counter, counts: dict, rows: int = 40) -> str:
    busy = max(counts["busy"], 1)
    lines = [
        f"samples: {counts['busy']} busy outside bcrypt, {counts['hashing']} hashing, {counts['idle']} idle",
        "",
        "inclusive share of the busy samples outside bcrypt:",
    ]
    lines += [f"{100 * n / busy:5.1f}%  {name}" for name, n in inclusive.most_common(rows)]
    lines += ["", "self share:"]
    lines += [f"{100 * n / busy:5.1f}%  {name}" for name, n in own.most_common(rows // 2)]
    return "\n".join(lines) + "\n"


def counts_at(history: Path, when: float) -> dict[str, tuple[int, int]]:
    """Requests and failures so far, by type, at the last history row at or before ``when`` (epoch seconds)."""
    found: dict[str, tuple[int, int]] = {}
    with open(history, newline="") as file:
        for row in csv.DictReader(file):
            if int(row["Timestamp"]) > when:
                break
            key = f"{row['Type']} {row['Name']}".strip()
            found[key] = (int(row["Total Request Count"]), int(row["Total Failure Count"]))
    return found


def window_counts(history: Path, start: float, end: float) -> dict:
    """Requests, failures and successful hashing requests between two moments of the run."""
    before, after = counts_at(history, start), counts_at(history, end)

    def done(key: str) -> tuple[int, int]:
        requests, failures = after.get(key, (0, 0))
        earlier_requests, earlier_failures = before.get(key, (0, 0))
        return requests - earlier_requests, failures - earlier_failures

    hashes = sum(done(key)[0] - done(key)[1] for key in (LOG_IN, REGISTER, FIRST_LOGIN_KEY))
    requests, failures = done("Aggregated")
    return {"requests": requests, "failures": failures, "hashes": hashes}


def locust_figures(csv_prefix: Path) -> dict:
    """Requests, failures and successful hashing requests, by type, from locust's CSV."""
    with open(f"{csv_prefix}_stats.csv", newline="") as file:
        rows = {f"{r['Type']} {r['Name']}".strip(): r for r in csv.DictReader(file)}
    total = rows.pop("Aggregated")
    hashes = sum(
        int(rows[key]["Request Count"]) - int(rows[key]["Failure Count"])
        for key in (LOG_IN, REGISTER, FIRST_LOGIN_KEY)
        if key in rows
    )
    p95 = {key: row["95%"] for key, row in rows.items()}
    return {
        "requests": int(total["Request Count"]),
        "failures": int(total["Failure Count"]),
        "rps": float(total["Requests/s"]),
        "p95_ms": {"all": total["95%"], **p95},
        "hashes": hashes,
    }


def profile(stage_number: int, users: int, seconds: float, out: Path, part: str | None = None) -> dict:
    plan = make_plan([stage_number], quick=False, environ=os.environ)
    stage = stages.get_stage(stage_number, part)
    out.mkdir(parents=True, exist_ok=True)
    machine.say(f"bcrypt at cost {plan.bcrypt_cost}: probing the CPU a hash costs")
    bound = machine.bcrypt_bound(plan.bcrypt_cost, plan.bcrypt_probe_s)
    rate = max(1.0, round(plan.spawn_share * bound["hashes_per_s"], 1))
    ramp = users / rate
    commit = machine.git_commit()  # what the servers load now, whatever the tree holds when the run ends
    # As the bench serves it: its own database (PostgreSQL for a stage that uses it), a fresh cache prefix.
    with serving.served(plan, stage, serving.seeded_master(plan)) as (running, _):
        tiers = tiers_of(running)  # nginx, the app nodes, and PostgreSQL and Redis where the stage uses them
        command = [
            str(stages.BIN / "locust"), "-f", "locustfile.py", "--headless", "-H", running.url.rstrip("/"),
            "-u", str(users), "-r", str(rate), "--run-time", f"{int(ramp + seconds)}s",
            "--csv", str(out / "locust"), "--csv-full-history", "--only-summary", "--loglevel", "WARNING",
        ]  # fmt: skip
        locust_env = {**os.environ, "TWEEPY_SEED_USERS": str(plan.users)}
        machine.say(f"stage {stage_number}: {users} users, ramp {ramp:.0f} s at {rate}/s, then {seconds:g} s")
        with open(out / "locust.log", "wb") as log:
            locust = subprocess.Popen(command, cwd=stages.ROOT, env=locust_env, stdout=log, stderr=subprocess.STDOUT)
            time.sleep(ramp + seconds / 2)
            tiers_before = {name: cpu_seconds(process_tree(pids)) for name, pids in tiers.items()}
            app = process_tree(tiers["app"])
            threads_before = thread_cpu_seconds(app, HASHING_THREAD)
            pages_before = run_and_wait_seconds(app, but_not=HASHING_THREAD)
            sampled, sampled_at = time.monotonic(), time.time()
            apps = app_servers(running.children)
            record_stacks(apps, int(seconds / 2) - 2, out / "profile.raw", flame=out / "flame.svg")
            tiers_window = {name: cpu_seconds(process_tree(pids)) - tiers_before[name] for name, pids in tiers.items()}
            cpu_window = sum(tiers_window.values())
            app = process_tree(tiers["app"])
            threads_window = thread_cpu_seconds(app, HASHING_THREAD) - threads_before
            pages_after = run_and_wait_seconds(app, but_not=HASHING_THREAD)
            window_s, window_end = time.monotonic() - sampled, time.time()
            locust.wait(timeout=seconds + 60)
    figures = locust_figures(out / "locust")
    # locust writes its history once a second: the window is whole seconds inside the sampled time.
    window = window_counts(out / "locust_stats_history.csv", sampled_at + 1, window_end - 1)
    run_s = ramp + seconds
    # CPU scaled to the requests, which were counted over whole seconds inside the sampled time.
    ms_a_request = 1000 * (window_s - 2) / window_s / max(window["requests"], 1)
    per_request_ms, threads_ms = cpu_window * ms_a_request, threads_window * ms_a_request
    hash_ms = cpu_ms_per_hash(bound, stage.app_setting("BCRYPT_LIBRARY"))
    hashes_per_request = window["hashes"] / max(window["requests"], 1)
    result = {
        "stage": stage_number,
        "part": stage.part,
        "commit": commit,
        "users": users,
        "seconds": run_s,
        "bcrypt_cost": plan.bcrypt_cost,
        "data": {"users": plan.users, "tweets": plan.tweets, "follows": plan.follows},
        "server_cpu_ms_per_request": round(per_request_ms, 2),
        "tier_cpu_ms_per_request": {name: round(cpu * ms_a_request, 3) for name, cpu in tiers_window.items()},
        "bcrypt_ms_per_request": round(hashes_per_request * hash_ms, 2),
        "non_bcrypt_cpu_ms_per_request": round(per_request_ms - hashes_per_request * hash_ms, 2),
        "cpu_ms_per_hash": hash_ms,
        # Measured, where the stage hashes on threads of its own (BCRYPT_IN_THREADPOOL): their CPU, and the rest.
        "hashing_threads_cpu_ms_per_request": round(threads_ms, 2) if threads_ms else None,
        "outside_hashing_threads_cpu_ms_per_request": round(per_request_ms - threads_ms, 2) if threads_ms else None,
        "window": {"seconds": round(window_s, 1), **window},
        # py-spy counts a thread waiting for a core as busy: how much of the app's busy time was that wait.
        "app_threads_outside_hashing_s": {
            "on_a_core": round(pages_after[0] - pages_before[0], 1),
            "waiting_for_one": round(pages_after[1] - pages_before[1], 1),
        },
        **figures,
    }
    with open(out / "profile.raw") as raw:
        inclusive, own, counts = busy_functions(raw)
    (out / "top.txt").write_text(top_table(inclusive, own, counts))
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    (out / "summary.md").write_text(summary(result, stage, top_table(inclusive, own, counts, rows=25)))
    # Read into the table and the window's counts above; kept, they would be megabytes a profile.
    for scratch in ("profile.raw", "locust_stats_history.csv"):
        (out / scratch).unlink()
    return result


def summary(result: dict, stage: stages.Stage, top: str) -> str:
    m = machine.machine()
    data = result["data"]
    return "\n".join(
        [
            f"# Profile of stage {stage.label}",
            "",
            f"{m['cores']} cores ({m['cpu']}); locust on the same machine; {result['users']} users for "
            f"{result['seconds']:.0f} s; bcrypt cost {result['bcrypt_cost']}; {data['users']:,} users and "
            f"{data['tweets']:,} tweets seeded; commit {result['commit']}.",
            "",
            f"- {result['rps']:.1f} requests/s over the run, {result['failures']} failed of {result['requests']}.",
            f"- Server CPU (nginx, every uWSGI process or run.py, and PostgreSQL and Redis where the stage "
            f"uses them) while profiled "
            f"({result['window']['requests']} requests in {result['window']['seconds']:g} s): "
            f"**{result['server_cpu_ms_per_request']} ms a request**, of which bcrypt "
            f"{result['bcrypt_ms_per_request']} ms ({result['window']['hashes']} hashes at "
            f"{result['cpu_ms_per_hash']} ms) and everything else **{result['non_bcrypt_cpu_ms_per_request']} ms**.",
            *threads_line(result),
            *tiers_line(result),
            *waiting_line(result),
            f"- p95 ms: {json.dumps(result['p95_ms'])}",
            "",
            "![flame graph](flame.svg)",
            "",
            "```",
            top.rstrip(),
            "```",
            "",
        ]
    )


def tiers_line(result: dict) -> list[str]:
    """The server's CPU a request, tier by tier, where it has more tiers than nginx and the app."""
    tiers = result.get("tier_cpu_ms_per_request") or {}
    if len(tiers) <= 2:
        return []
    return ["- By tier, ms a request: " + ", ".join(f"{name} {ms:g}" for name, ms in tiers.items()) + "."]


def waiting_line(result: dict) -> list[str]:
    """How long the app's threads outside hashing ran and waited for a core while sampled: py-spy counts
    both as busy, so a function a thread waits in after waking another process looks costlier than it is."""
    app = result.get("app_threads_outside_hashing_s")
    if not app:
        return []
    return [
        f"- While sampled, the app's threads outside hashing were on a core {app['on_a_core']:g} s and waited "
        f"for one {app['waiting_for_one']:g} s (the scheduler's counts); py-spy's busy samples, 100 a second, "
        "count both."
    ]


def threads_line(result: dict) -> list[str]:
    """The hashing threads' own CPU, where the stage has them: measured, where bcrypt's share above is estimated."""
    threads = result.get("hashing_threads_cpu_ms_per_request")
    if not threads:
        return []
    estimate = result["bcrypt_ms_per_request"]
    against = f" ({threads / estimate:.0%} of that estimate)" if estimate else ""
    return [
        f"- Measured thread by thread: the hashing threads (`{HASHING_THREAD}`) took {threads} ms a request"
        f"{against}, and everything else **{result['outside_hashing_threads_cpu_ms_per_request']} ms**."
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profile", description=__doc__.split("\n")[0])
    parser.add_argument("stage", type=int)
    parser.add_argument("--part", help="one part of the step: stages/N-name/part-<part>.env")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--out", type=Path, help="default: results/profiles/<date>-stage<N>[-<part>]/")
    args = parser.parse_args(argv)
    stage = stages.get_stage(args.stage, args.part)
    out = args.out or RESULTS / f"{datetime.now(UTC):%Y-%m-%d-%H%M}-stage{stage.slug}"
    result = profile(args.stage, args.users, args.seconds, out, args.part)
    machine.say(
        f"stage {stage.label}: {result['server_cpu_ms_per_request']} ms of server CPU a request, "
        f"{result['non_bcrypt_cpu_ms_per_request']} ms outside bcrypt"
        + (
            f" ({result['outside_hashing_threads_cpu_ms_per_request']} outside the hashing threads)"
            if result["outside_hashing_threads_cpu_ms_per_request"]
            else ""
        )
        + f"; {out}/summary.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
