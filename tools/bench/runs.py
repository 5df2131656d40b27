"""A bench run's results, from any version of the bench, and the cells every table shows.

Every row names the run (date) and commit it came from. Results written before the
per-type bar existed are re-judged with it from what they recorded (:func:`normalize`);
a search that was cut short or crashed says so instead of showing a capacity.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import stages
from tools.bench.figures import plain_stats
from tools.bench.headline import capacity_of, overload_as_felt
from tools.protocol import (
    AGGREGATED,
    FIRST_LOGIN_KEY,
    Bar,
    RequestStats,
    completed_tasks,
    hashes_done,
    misses,
    slowest,
)

ROOT = stages.ROOT
RESULTS = ROOT / "results"
# The talk's figures, beside ours: 4 CPUs up to the concurrency step; it does not say what the 1K machine had.
TALK = {
    1: "50 QPS, 4 CPUs",
    2: "180 QPS, 4 CPUs",
    3: "250 QPS, 4 CPUs",
    4: "350 QPS, 4 CPUs",
    5: "550 QPS, 4 CPUs",
    6: "1K QPS, vCPUs not stated",
}
TALK_QPS = {1: 50, 2: 180, 3: 250, 4: 350, 5: 550, 6: 1000}


# --- results from any version of the bench ------------------------------------------------------


def in_ladder_order(result: dict) -> tuple:
    """Stages by number, each step's parts before the whole step."""
    return (result["stage"], result.get("part") is None, result.get("part") or "")


def talk_figure(result: dict) -> str:
    """The talk's figure for the same step (none for a part of one)."""
    return "—" if result.get("part") else TALK.get(result["stage"], "—")


def talk_qps(result: dict) -> int | None:
    """The talk's QPS for the same step, as a number (none for a part of one)."""
    return None if result.get("part") else TALK_QPS.get(result["stage"])


def bar_of(report: dict) -> Bar:
    return Bar(**report["bar"]) if report.get("bar") else Bar()


def normalize(report: dict, results: Path = RESULTS) -> dict:
    """The report with every field the reports read, whatever bench version wrote it.

    Runs from before the per-type bar recorded their windows' per-type stats and their ramps'
    first logins, not the other requests of their ramps: their steps are re-judged from those."""
    bar = bar_of(report)
    own_run = {key: report.get(key) for key in ("date", "commit", "machine", "generator", "bcrypt", "plan")}
    for result in report["stages"]:
        run = {**own_run, **result["run"]} if "run" not in result or result["run"]["date"] == own_run["date"] else {}
        if not run:  # a stage kept from an earlier run: its own machine, plan and probe, never this run's
            run = {**result["run"], **_details_of_run(result["run"], results, own_run)}
        result["run"] = run
        if "search" not in result:
            _rejudge(result, bar)
            result["search"] = {"state": "complete", "ended": "", "rejudged": True}
        result.setdefault("overload", None)
        result.setdefault("ceiling", {"rps": result.get("ceiling_rps"), "lower_bound": None, "failures": None})
        judge_capacity(result, bar)
    return report


def judge_capacity(result: dict, bar: Bar) -> None:
    """The stage's capacity step and headline (``headline.capacity_of``, the one definition), and its
    overload step read against them; windows recorded before tasks were counted get their count."""
    overload = result.get("overload")
    for window in [*result["steps"], *(s for step in result["steps"] for s in step.get("repeats") or []), overload]:
        if window and "by_request" in window and "tasks_per_s" not in window and window.get("window_s"):
            tasks = completed_tasks(plain_stats(window["by_request"]))
            window["tasks_per_s"] = round(tasks / window["window_s"], 1)
    result["best"], result["capacity"] = capacity_of(result["steps"], bar)
    if overload and "by_request" in overload:
        overload.pop("capacity_rps", None)
        overload.update(overload_as_felt(overload, result["capacity"]))


def _details_of_run(run: dict, results: Path, fallback: dict) -> dict:
    """The machine, probe and plan of an earlier run, from its own results.json when it is still there."""
    for path in sorted(results.glob("*/results.json")):
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if earlier.get("date") == run.get("date") and earlier.get("commit") == run.get("commit"):
            return {key: run.get(key) or earlier.get(key) for key in ("machine", "generator", "bcrypt", "plan")}
    # Not found: the machine and data are this run's (--keep-from requires it); the probe is unknown.
    return {
        "bcrypt": run.get("bcrypt"),
        **{key: run.get(key) or fallback.get(key) for key in ("machine", "generator", "plan")},
    }


def _rejudge(result: dict, bar: Bar) -> None:
    """Judge the steps of an old run with the per-type bar (its capacity is then found as any run's)."""
    for step in result["steps"]:
        if "by_request" in step:
            by_type = plain_stats(step["by_request"])
            total = RequestStats(AGGREGATED, step["requests"], step["failures"], step["p95_ms"])
            step.setdefault("hashes", hashes_done(by_type))
            worst = slowest(by_type, bar)
            step.setdefault("slowest", worst.name if worst else None)
            step.setdefault("slowest_p95_ms", worst.p95_ms if worst else None)
            missed = misses(by_type, total, bar)
            found = ["window: " + "; ".join(missed)] if missed else []
        else:
            found = [step.get("reason", "no window was measured")]
        login_p95, login_failures = step.get("login_p95_ms"), step.get("login_failures") or 0
        step.setdefault("first_login_p95_ms", login_p95)
        if login_p95 is not None and login_p95 >= bar.max_p95_ms:
            found.append(f"ramp: p95 too slow for {FIRST_LOGIN_KEY} ({login_p95:.0f} ms)")
        if login_failures > bar.max_failures:
            found.append(f"ramp: {login_failures} failures ({FIRST_LOGIN_KEY} {login_failures})")
        step["met_bar"] = not found
        step["reasons"] = found


# --- cells ---------------------------------------------------------------------------------------


def run_label(result: dict) -> str:
    run = result["run"]
    return f"{run['date']}, {run['commit']}"


def ms(value) -> str:
    return "—" if value is None else f"{value:.0f}"


def p95_of(step: dict, key: str) -> str:
    entry = (step.get("by_request") or {}).get(key)
    return ms(entry["p95_ms"]) if entry and entry["requests"] else "—"


def slowest_cell(step: dict) -> str:
    return f"`{step['slowest']}` {ms(step.get('slowest_p95_ms'))} ms" if step.get("slowest") else "—"


def ceiling_cell(result: dict) -> str:
    c = result["ceiling"]
    if c.get("rps") is None:
        return "—"
    if c.get("lower_bound") is None:
        return f"{c['rps']:.0f} (generator not checked)"
    failed = f", {c['failures']} failed" if c.get("failures") else ", 0 failed"
    return f"≥ {c['rps']:.0f} (lower bound){failed}" if c["lower_bound"] else f"{c['rps']:.0f}{failed}"


def capacity_of_row(result: dict) -> dict | None:
    """A row's capacity headline, judged now (with the default bar) for a row that ``normalize`` did not see."""
    if "capacity" not in result:
        result["capacity"] = capacity_of(result["steps"], Bar())[1]
    return result["capacity"]


def served_text(overload: dict) -> str:
    """The share of the overload step's users who got a task through in its window."""
    share = overload.get("users_served_share")
    return "—" if share is None else f"{100 * share:.0f}%"


def spread_text(capacity: dict) -> str:
    """How far the windows a capacity rests on spread, and how many there were."""
    rps, n = capacity["rps"], capacity["windows"]
    return f"{rps['min']}-{rps['max']}, {n} windows" if n > 1 else "1 window"


def capacity_cell(result: dict) -> str:
    """The stage's QPS at the bar (the median of its capacity step's windows, with their spread), or why
    there is none to trust."""
    search, capacity = result["search"], capacity_of_row(result)
    if search["state"] == "crashed":
        return f"crashed: {search.get('note', '')}"
    if capacity is None:
        first = result["steps"][0]["users"] if result["steps"] else "?"
        return f"— (missed at {first} users)"
    median, spread = capacity["rps"]["median"], spread_text(capacity)
    if search["state"] == "cut short":
        return f"≥ {median} ({spread}; search cut short)"
    if search.get("ended", "").startswith("every step met"):
        return f"≥ {median} ({spread}; every step met the bar)"
    return f"**{median}** ({spread})"
