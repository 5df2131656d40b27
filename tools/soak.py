"""``make soak``: the default stage under the protocol for several minutes, its memory sampled.

    python -m tools.soak                         stage 6, 200 users, 5 minutes
    python -m tools.soak 6 --users 300 --minutes 10

The stage is served as ``make bench`` serves it (its own database seeded with the bench's data,
empty caches), locust runs the protocol at a steady number of users, and every ``--every``
seconds the server processes' memory (PSS, nginx and every uWSGI process) is sampled. The
report says whether memory stayed within the caches' documented budget (each
process may hold ``CACHE_BYTES`` of reads and ``FRAGMENT_CACHE_BYTES`` of
rendered tweets on top of what it needs to run) and whether any request failed.
Written to ``results/soak/<date>-stage<N>/SOAK.md`` with the samples in ``soak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tools import stages
from tools.bench import machine, serving
from tools.bench.plan import make_plan
from tools.bench.procfs import memory_mb, process_tree
from tools.profile import locust_figures

RESULTS = stages.ROOT / "results" / "soak"


def budget_mb(stage: stages.Stage) -> float:
    """What the caches of every app process may hold, in MiB (what a process needs to run comes on top)."""
    cached = int(stage.app_setting("CACHE_BYTES")) if stage.app_setting("CACHE") == "local" else 0
    fragments = int(stage.app_setting("FRAGMENT_CACHE_BYTES")) if stage.app_setting("FRAGMENT_CACHE") == "true" else 0
    processes = stage.nodes * stage.processes if stage.server == "uwsgi" else 1
    return processes * (cached + fragments) / 2**20


def soak(stage_number: int, users: int, minutes: float, every: float, out: Path) -> dict:
    plan = make_plan([stage_number], quick=False, environ=os.environ)
    stage = stages.get_stage(stage_number)
    out.mkdir(parents=True, exist_ok=True)
    rate = 4.0  # first logins a second: well within what the machine hashes
    ramp = users / rate
    samples = []
    commit = machine.git_commit()  # what the servers load now, whatever the tree holds when the run ends
    with serving.served(plan, stage, serving.seeded_master(plan)) as (running, _):
        roots = [process.pid for _, process in running.children]
        command = [
            str(stages.BIN / "locust"), "-f", "locustfile.py", "--headless", "-H", running.url.rstrip("/"),
            "-u", str(users), "-r", str(rate), "--run-time", f"{int(ramp + minutes * 60)}s",
            "--csv", str(out / "locust"), "--only-summary", "--loglevel", "WARNING",
        ]  # fmt: skip
        locust_env = {**os.environ, "TWEEPY_SEED_USERS": str(plan.users)}
        machine.say(f"stage {stage_number}: {users} users for {minutes:g} minutes after a {ramp:.0f} s ramp")
        started = time.monotonic()
        with open(out / "locust.log", "wb") as log:
            locust = subprocess.Popen(command, cwd=stages.ROOT, env=locust_env, stdout=log, stderr=subprocess.STDOUT)
            while locust.poll() is None:
                elapsed = time.monotonic() - started
                samples.append({"s": round(elapsed), "mib": round(memory_mb(process_tree(roots)), 1)})
                if len(samples) % 6 == 1:
                    machine.say(f"  {elapsed:4.0f} s: server memory {samples[-1]['mib']} MiB")
                time.sleep(every)
    figures = locust_figures(out / "locust")
    steady = [s for s in samples if s["s"] >= ramp]
    first, peak = (steady[0]["mib"], max(s["mib"] for s in steady)) if steady else (0.0, 0.0)
    result = {
        "stage": stage_number,
        "commit": commit,
        "users": users,
        "minutes": minutes,
        "budget_mib": round(budget_mb(stage), 1),
        "memory_after_ramp_mib": first,
        "peak_memory_mib": peak,
        "growth_mib": round(peak - first, 1),
        "within_budget": peak - first <= budget_mb(stage),
        "samples": samples,
        **{k: figures[k] for k in ("requests", "failures", "rps", "p95_ms")},
    }
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    (out / "SOAK.md").write_text(report(result, stage, plan))
    return result


def report(result: dict, stage: stages.Stage, plan) -> str:
    m = machine.machine()
    verdict = "within" if result["within_budget"] else "OVER"
    lines = [
        f"# Soak of stage {result['stage']} ({stage.name})",
        "",
        f"{m['cores']} cores ({m['cpu']}); locust on the same machine; {result['users']} users for "
        f"{result['minutes']:g} minutes; bcrypt cost {plan.bcrypt_cost}; {plan.users:,} users and {plan.tweets:,} "
        f"tweets seeded; commit {result['commit']}.",
        "",
        f"- {result['requests']} requests ({result['rps']:.1f} a second), **{result['failures']} failed**; "
        f"p95 ms: {json.dumps(result['p95_ms'])}.",
        f"- Server memory (PSS of nginx and every uWSGI process): {result['memory_after_ramp_mib']} MiB once every "
        f"user had logged in, {result['peak_memory_mib']} MiB at most: grew {result['growth_mib']} MiB, "
        f"**{verdict}** the caches' budget of {result['budget_mib']} MiB "
        f"(CACHE_BYTES and FRAGMENT_CACHE_BYTES for each of the stage's processes).",
        "",
        "| seconds | server MiB |",
        "|---|---|",
        *(f"| {s['s']} | {s['mib']} |" for s in result["samples"][:: max(1, len(result["samples"]) // 30)]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.split("\n")[0])
    parser.add_argument("stage", type=int, nargs="?", default=stages.DEFAULT_STAGE)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--every", type=float, default=10, help="seconds between memory samples")
    parser.add_argument("--out", type=Path, help="default: results/soak/<date>-stage<N>/")
    args = parser.parse_args(argv)
    out = args.out or RESULTS / f"{datetime.now(UTC):%Y-%m-%d-%H%M}-stage{args.stage}"
    result = soak(args.stage, args.users, args.minutes, args.every, out)
    machine.say(
        f"stage {args.stage}: {result['failures']} failed of {result['requests']}; memory grew "
        f"{result['growth_mib']} MiB (budget {result['budget_mib']} MiB); {out}/SOAK.md"
    )
    return 0 if result["failures"] == 0 and result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
