"""A stage's capacity, defined once: the highest step of its search that met the bar (its ramp
and window) and whose windows' median meets it too, the search's own window and the repeats measured at that
step alike. Its figures are medians with their spread and the count of windows they rest on;
the overload step is read against them, counted in completed tasks and in users served.
Nothing here imports locust: the load shape, the reports and the tests share it."""

from __future__ import annotations

from collections.abc import Mapping

from tools.bench.figures import judged, median_and_spread, plain_stats, probe_of, protocol_qps_bound
from tools.protocol import AGGREGATED, Bar, RequestStats

# How many windows a published capacity rests on at least: the search's own, then repeats at its step.
PUBLISHED_WINDOWS = 3
# What a refused request's failure says (locustfile.explain): busy (503) or throttled (429).
REFUSALS = ("got 503", "got 429")


def windows_of(step: Mapping) -> list[dict]:
    """The measured windows of a step: the search's own (its figures are the step's), then its repeats."""
    own = [dict(step)] if "by_request" in step else []
    return own + list(step.get("repeats") or [])


def typical_window(step: Mapping | None) -> Mapping:
    """The window of a step whose QPS is the median of its windows' (the lower middle one of an even
    count): every figure read from one window (the CPU a request with bcrypt apart, the hashes, the
    tiers, memory, the generator) comes from it, the typical window beside the step's medians rather
    than whichever the search measured first."""
    windows = sorted(windows_of(step or {}), key=lambda w: w["rps"])
    return windows[(len(windows) - 1) // 2] if windows else dict(step or {})


def _median(values: list[float]) -> float:
    return median_and_spread(values)["median"] if values else 0


def median_window(windows: list[Mapping], bar: Bar) -> dict:
    """One window made of the medians of several, request type by request type, judged by the bar."""
    types = sorted({name for w in windows for name in w["by_request"]})
    by_type = []
    for name in types:
        seen = [plain_stats({name: w["by_request"][name]})[0] for w in windows if name in w["by_request"]]
        every = [w["by_request"].get(name, {}) for w in windows]
        by_type.append(
            RequestStats(
                name,
                round(_median([s.get("requests", 0) for s in every])),
                round(_median([s.get("failures", 0) for s in every])),
                _median([s.p95_ms for s in seen]),
                max(s.max_ms for s in seen),
            )
        )
    total = RequestStats(
        AGGREGATED,
        round(_median([w["requests"] for w in windows])),
        round(_median([w["failures"] for w in windows])),
        _median([w["p95_ms"] for w in windows]),
        max(w.get("max_ms") or 0 for w in windows),
    )
    return judged(by_type, total, _median([w["window_s"] for w in windows]), bar)


def step_headline(step: Mapping, bar: Bar) -> dict | None:
    """A step's figures as medians of its windows, with their spread and count; None without a window."""
    windows = windows_of(step)
    if not windows:
        return None
    median = median_window(windows, bar)
    spread = {
        key: median_and_spread([w[key] for w in windows if w.get(key) is not None])
        for key in ("rps", "tasks_per_s", "server_cpu_ms_per_request")
    }
    return {
        "users": step["users"],
        "windows": len(windows),
        # The search's own verdict holds its ramp too; the median, every window at the step.
        "met": bool(step.get("met_bar")) and median["met"],
        **{key: value for key, value in median.items() if key != "met"},
        **spread,
    }


def capacity_of(steps: list[Mapping], bar: Bar) -> tuple[Mapping | None, dict | None]:
    """The capacity step and its headline: the highest step, before the first one whose median missed,
    whose median meets the bar."""
    found = (None, None)
    for step in steps:
        headline = step_headline(step, bar)
        if headline is None or not headline["met"]:
            break
        found = (step, headline)
    return found


def share_of_bound(rps: float, bound: Mapping | None, library: str = "pyca") -> float | None:
    """QPS as a share of the run's own bcrypt bound (its library's hashes a second x 247/3)."""
    probe = probe_of(bound or {}, library)
    if not probe or not probe.get("hashes_per_s"):
        return None
    return round(rps / protocol_qps_bound(probe["hashes_per_s"]), 3)


def refusals_by_type(window: Mapping) -> dict[str, dict]:
    """Requests of each type refused as busy or throttled, and their share of that type's requests."""
    refused: dict[str, int] = {}
    for error, count in (window.get("errors") or {}).items():
        where, _, what = error.partition(": ")
        if any(mark in what for mark in REFUSALS):
            refused[where] = refused.get(where, 0) + count
    by_type = window.get("by_request") or {}
    return {
        name: {"refused": count, "share": round(count / by_type[name]["requests"], 4)}
        for name, count in sorted(refused.items())
        if by_type.get(name, {}).get("requests")
    }


def overload_as_felt(window: Mapping, capacity: Mapping | None) -> dict:
    """Past capacity, as users feel it: completed tasks a second (a retry's login form is no task)
    against the capacity's, users who got at least one task through, and refusals by request type."""
    tasks = window.get("tasks_per_s")
    capacity_tasks = ((capacity or {}).get("tasks_per_s") or {}).get("median")
    users, served = window.get("users_running"), window.get("users_served")
    pct = round(100 * tasks / capacity_tasks, 1) if tasks is not None and capacity_tasks else None
    return {
        "goodput_tasks_per_s": tasks,
        "goodput_pct_of_capacity": pct,
        "capacity_tasks_per_s": capacity_tasks,
        "users_served_share": round(served / users, 3) if users and served is not None else None,
        "refused_by_type": refusals_by_type(window),
    }
