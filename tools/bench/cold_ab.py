"""``make cold``: stages' cold starts and herds at equal users, interleaved, in one run.

    python -m tools.bench.cold_ab --stages "6 4" --users 500 --repeat 2     runs 6, 4, 6, 4

Each run probes the host's bcrypt first (a shared host's speed drifts between runs), starts the stage
afresh, and measures the bench's cold start and herd (``measure.measure_cold_start``, its settings from
``tools/protocol.py``). ``cold.json`` keeps every window; ``README.md`` tables each run's medians."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path

from tools import stages
from tools.bench import measure, serving
from tools.bench.__main__ import stop_cleanly_on_sigterm
from tools.bench.cold_report import herd_cells, p95_cell
from tools.bench.machine import ROOT, bcrypt_bound, git_commit, machine, say
from tools.bench.plan import make_plan
from tools.bench.runs import RESULTS
from tools.protocol import LOG_IN, TIMELINE


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.cold_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--stages", required=True, help='stage numbers in the order run, e.g. "6 4"')
    parser.add_argument("--users", type=int, required=True, help="users arriving for each cold start")
    parser.add_argument("--repeat", type=int, default=2, help="times the stages are run in turn (default 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny data, short windows")
    parser.add_argument("--out", type=Path, help="write here instead of results/<date>-<host>-cold-ab-<stages>/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stop_cleanly_on_sigterm()
    numbers = [int(n) for n in args.stages.replace(",", " ").split()]
    plan = make_plan(numbers, args.quick, os.environ)
    now = datetime.now(UTC)
    name = f"{now:%Y-%m-%d-%H%M}-{socket.gethostname()}-cold-ab-{'-'.join(map(str, numbers))}"
    # A smoke run's tiny data measures nothing worth keeping: it stays out of results/.
    folder = args.out or (serving.WORK / "quick-cold" if args.quick else RESULTS / name)
    folder.mkdir(parents=True, exist_ok=True)
    raw = serving.WORK / "cold-ab"
    raw.mkdir(parents=True, exist_ok=True)
    master = serving.seeded_master(plan)
    about = {"date": f"{now:%Y-%m-%d %H:%M} UTC", "commit": git_commit(), "machine": machine(), "plan": plan}
    runs = []
    for _ in range(args.repeat):
        for number in numbers:
            stage = stages.get_stage(number)
            say(f"run {len(runs) + 1}: stage {stage.label}, {args.users} users")
            bound = bcrypt_bound(plan.bcrypt_cost, plan.bcrypt_probe_s)
            say(f"  {speeds_of(bound)} hashes a second (pyca / libxcrypt)")
            with serving.served(plan, stage, master) as (running, _):
                cold = measure.measure_cold_start(plan, running, raw, args.users)
            say(measure.cold_line(stage.label, cold))
            runs.append({"run": len(runs) + 1, "stage": number, "users": args.users, "bound": bound, "cold": cold})
            (folder / "cold.json").write_text(json.dumps(runs, separators=(",", ":")))
    (folder / "README.md").write_text(readme(runs, about))
    shutil.rmtree(raw, ignore_errors=True)
    say(f"written: {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}/README.md")
    return 0


def readme(runs: list[dict], about: dict) -> str:
    plan, host = about["plan"], about["machine"]
    order = ", ".join(str(run["stage"]) for run in runs)
    measured = list(dict.fromkeys(str(run["stage"]) for run in runs))
    times = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    title = (
        f"# Cold starts of stage {measured[0]}, {times} at {runs[0]['users']} users"
        if len(measured) == 1
        else f"# Cold starts of stages {' and '.join(measured)} at equal users, interleaved"
    )
    lines = [
        title,
        "",
        f"{host['cores']} cores ({host['cpu']}), {host['memory_gib']} GiB, bcrypt cost {plan.bcrypt_cost}, "
        f"commit {about['commit']}, {about['date']}; {plan.users:,} users and {plan.tweets:,} tweets seeded.",
        f"Each run: the stage started afresh (empty caches){network_of(plan)}, {runs[0]['users']} users arriving at "
        f"{plan.cold_rate:g} a second, {plan.cold_windows} window{'s' if plan.cold_windows != 1 else ''} of "
        f"{plan.window_s:g} s once all had logged in, each judged by the bar, then "
        f"{herds_text(plan.herds, round(plan.herd * runs[0]['users']))}. Run in the "
        f"order {order}; the host's hashes a second (pyca / libxcrypt) probed before each run. Medians of the "
        "windows, QPS with its range; `cold.json` holds every window. Made by "
        "`python -m tools.bench.cold_ab` (`make cold`).",
        "",
        *table(runs),
        "",
    ]
    return "\n".join(lines)


def herds_text(herds: int, users: int) -> str:
    one = f"{users:,} users for a window, whose newcomers then left at once"
    if herds == 1:
        return f"a herd of {one}"
    return f"{herds} herds, each of {one}, with a window at the users between them (medians, then each herd's)"


def network_of(plan) -> str:
    """The delay the bench put between the app nodes and their database and cache, if any."""
    if not plan.network_delay_ms:
        return ""
    delay = f"{plan.network_delay_ms:g} ms"
    return f", {delay} of network each way to PostgreSQL and Redis (`TWEEPY_BENCH_NETWORK_DELAY_MS`)"


def table(runs: list[dict]) -> list[str]:
    lines = [
        "| run | stage | hashes/s | windows | QPS | log in p95 ms | timeline p95 ms | server CPU ms a request "
        "| herd: tasks, % of the cold windows' | back under the bar |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        cold, speeds = run["cold"], speeds_of(run["bound"])
        summary, herd = cold.get("cold"), cold.get("herd_figures") or {}
        if not summary:
            lines.append(f"| {run['run']} | {run['stage']} | {speeds} | {cold.get('state')} | | | | | | |")
            continue
        rps = summary["rps"]
        goodput, back = herd_cells(herd, never="never", after="after ")
        lines.append(
            f"| {run['run']} | {run['stage']} | {speeds} | {windows_text(cold['windows'])} "
            f"| {rps['median']} ({rps['min']}-{rps['max']}) "
            f"| {p95_cell(summary, LOG_IN)} | {p95_cell(summary, TIMELINE)} "
            f"| {summary['server_cpu_ms_per_request']['median']:g} | {goodput} | {back} |"
        )
    return lines


def speeds_of(bound: dict) -> str:
    libraries = bound["libraries"]
    return " / ".join(f"{libraries[name]['hashes_per_s']:g}" for name in ("pyca", "libxcrypt") if name in libraries)


def windows_text(windows: list[dict]) -> str:
    """How many windows met the bar, then each: met, or missed with its failures."""
    each = " ".join("met" if w["met"] else f"missed ({w['failures']} failed)" for w in windows)
    return f"{sum(w['met'] for w in windows)}/{len(windows)}: {each}"


if __name__ == "__main__":
    raise SystemExit(main())
