"""Arithmetic on what the bench measured: a window's figures, the overload step's goodput, the
capacity projection. Nothing here measures, starts anything or imports locust, so the load shape
(inside locust), the reports and the tests share it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tools.protocol import (
    HASHES_PER_CYCLE,
    REQUESTS_PER_CYCLE,
    Bar,
    RequestStats,
    completed_tasks,
    hashes_done,
    misses,
    slowest,
    verdict,
)

PROJECTED_CORES = (4, 8)


def plain_stats(by_request: Mapping[str, Mapping]) -> list[RequestStats]:
    """Per-type stats back from a step's ``by_request`` (as the shape saves them)."""
    return [
        RequestStats(name, s["requests"], s.get("failures", 0), s.get("p95_ms") or 0, s.get("max_ms") or 0)
        for name, s in by_request.items()
    ]


def by_request(by_type: Iterable[RequestStats]) -> dict[str, dict]:
    """Per-type stats as saved in results.json, request types with no request left out."""
    return {
        t.name: {"requests": t.requests, "failures": t.failures, "p95_ms": t.p95_ms, "max_ms": t.max_ms}
        for t in by_type
        if t.requests
    }


def judged(by_type: list[RequestStats], total: RequestStats, seconds: float, bar: Bar) -> dict:
    """What the bar says of some traffic, and the figures it read."""
    ok, line = verdict(by_type, total, total.requests / seconds if seconds else 0.0, bar)
    worst = slowest(by_type, bar)
    return {
        "requests": total.requests,
        "failures": total.failures,
        "p95_ms": total.p95_ms,
        "max_ms": total.max_ms,
        "slowest": worst.name if worst else None,
        "slowest_p95_ms": worst.p95_ms if worst else None,
        "met": ok,
        "verdict": line,
        "misses": misses(by_type, total, bar),
        "by_request": by_request(by_type),
    }


def window_figures(
    by_type: list[RequestStats],
    total: RequestStats,
    seconds: float,
    server_cpu_s: float,
    generator_cpu_s: float,
    cores: int,
    bar: Bar,
) -> dict:
    """A measured window: throughput, goodput (in requests and in completed protocol tasks), hashes counted
    from its own requests, CPU per request."""
    requests = total.requests
    hashes = hashes_done(by_type)
    return {
        **judged(by_type, total, seconds, bar),
        "window_s": round(seconds, 3),  # to the millisecond, so its rates can be recomputed from raw data
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "goodput_rps": round((requests - total.failures) / seconds, 1) if seconds else 0.0,
        "tasks_per_s": round(completed_tasks(by_type) / seconds, 1) if seconds else 0.0,
        "hashes": hashes,
        "hashes_per_s": round(hashes / seconds, 2) if seconds else 0.0,
        "server_cpu_ms_per_request": round(1000 * server_cpu_s / requests, 2) if requests else None,
        "server_cpu_cores": round(server_cpu_s / seconds, 2) if seconds else 0.0,
        "generator_cpu_cores": round(generator_cpu_s / seconds, 2) if seconds else 0.0,
        "generator_cpu_ms_per_request": round(1000 * generator_cpu_s / requests, 3) if requests else None,
        "generator_cpu_share": round(generator_cpu_s / seconds / cores, 3) if seconds else 0.0,
    }


def median_and_spread(values: list[float]) -> dict:
    """The median of some windows' figure, with the smallest and largest."""
    ordered = sorted(values)
    if not ordered:
        return {}
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": round(median, 2), "min": ordered[0], "max": ordered[-1]}


def cold_summary(windows: list[dict]) -> dict:
    """The cold start's figures: medians of its windows, with their spread, and how many met the bar."""
    types = sorted({name for w in windows for name in w["by_request"]})
    return {
        "windows": len(windows),
        "windows_met": sum(1 for w in windows if w["met"]),
        "met": bool(windows) and all(w["met"] for w in windows),
        "rps": median_and_spread([w["rps"] for w in windows]),
        "tasks_per_s": median_and_spread([w["tasks_per_s"] for w in windows]),
        "failures": sum(w["failures"] for w in windows),
        "server_cpu_ms_per_request": median_and_spread([w["server_cpu_ms_per_request"] or 0 for w in windows]),
        "p95_ms": {
            name: median_and_spread([w["by_request"][name]["p95_ms"] for w in windows if name in w["by_request"]])
            for name in types
        },
    }


def herd_figures(windows: list[dict], herd: dict | None, recovery: list[dict]) -> dict:
    """The herd's goodput in completed tasks against the cold start's, and when the bar was met again."""
    capacity = median_and_spread([w["tasks_per_s"] for w in windows]).get("median", 0)
    back = next((w["ended_s_after_return"] for w in recovery if w["met"]), None)
    return {
        "tasks_per_s": herd["tasks_per_s"] if herd else None,
        "goodput_pct_of_capacity": round(100 * herd["tasks_per_s"] / capacity, 1) if herd and capacity else None,
        "failures": herd["failures"] if herd else None,
        "recovered_after_s": back,
    }


def herds_summary(herds: list[dict]) -> dict:
    """Several herds' figures (``herd_figures``) in one: medians, with each herd's own. A herd not back
    under the bar within the limit counts as slower than any that was; so does the median, if most were not."""
    goodput = [h["goodput_pct_of_capacity"] for h in herds if h["goodput_pct_of_capacity"] is not None]
    back = sorted((h["recovered_after_s"] for h in herds), key=lambda s: math.inf if s is None else s)
    tasks = [h["tasks_per_s"] for h in herds if h["tasks_per_s"] is not None]
    return {
        "herds": len(herds),
        "tasks_per_s": median_and_spread(tasks).get("median"),
        "goodput_pct_of_capacity": median_and_spread(goodput).get("median"),
        "goodput_pct_each": [h["goodput_pct_of_capacity"] for h in herds],
        "failures": sum(h["failures"] or 0 for h in herds),
        # Of an even count, the later of the middle two: a time that may be "never" is not averaged.
        "recovered_after_s": back[len(back) // 2] if back else None,
        "recovered_after_s_each": [h["recovered_after_s"] for h in herds],
    }


def step_verdict(before: dict | None, window: dict | None, ramp_problem: str | None = None) -> tuple[bool, list[str]]:
    """A step meets the bar only if everything its users did did: the ramp (and warm-up) and the window."""
    reasons = []
    if ramp_problem:
        reasons.append(ramp_problem)
    if before is not None and not before["met"]:
        reasons.append("ramp: " + "; ".join(before["misses"]))
    if window is None:
        reasons.append("no window was measured")
    elif not window.get("met", window.get("window_met")):
        reasons.append("window: " + "; ".join(window["misses"]))
    return not reasons, reasons


def overload_users(best_users: int | None, factor: float, maximum: int) -> int | None:
    """Users of the step past capacity: ``factor`` times the best step's, at most ``maximum``."""
    if not best_users or factor <= 0:
        return None
    return max(best_users + 1, min(maximum, round(best_users * factor)))


def overload_figures(window: Mapping) -> dict:
    """How the server holds up past capacity: successful requests a second, and the share that failed
    (``headline.overload_as_felt`` says what users got of it)."""
    requests, failures = window.get("requests", 0), window.get("failures", 0)
    seconds = window.get("window_s") or 0
    return {
        "goodput_rps": round((requests - failures) / seconds, 1) if seconds else 0.0,
        "failure_share": round(failures / requests, 4) if requests else None,
        "max_ms": window.get("max_ms"),
    }


def hash_library(result: Mapping) -> str:
    """The bcrypt library a stage hashes with: pyca unless its settings say otherwise."""
    return (result.get("settings") or {}).get("TWEEPY_BCRYPT_LIBRARY", "pyca")


def probe_of(bound: Mapping, library: str = "pyca") -> Mapping:
    """The bcrypt probe's figures for one library: its own when the run probed it, else pyca's (the
    bound's own figures), which is also what the app falls back to where the library cannot hash."""
    return (bound.get("libraries") or {}).get(library) or bound


def cpu_ms_per_hash(bound: Mapping, library: str = "pyca") -> float:
    """CPU time of one hash, as the bcrypt probe measured it (runs before it did: from its rate on every core)."""
    probe = probe_of(bound, library)
    return probe.get("cpu_ms_per_hash") or 1000 * bound["cores"] / probe["hashes_per_s"]


def protocol_qps_bound(hashes_per_s: float) -> float:
    """The protocol's QPS if the machine did nothing but its hashes: 3 hashes every 247 requests."""
    return hashes_per_s * REQUESTS_PER_CYCLE / HASHES_PER_CYCLE


def projection(
    server_cpu_ms_per_request: float,
    hashes: int,
    requests: int,
    ms_per_hash: float,
    cores: int,
    parallel: int | None,
) -> dict:
    """The QPS of the same stage on ``cores`` cores, the load generator on another machine.

    The window's server CPU minus its counted hashes is the app's own cost a request; the protocol
    adds 3 hashes every 247 requests back at the probe's cost. Cores beyond what the stage can run
    at once (``parallel``: 1 for the development server, its uWSGI processes otherwise) add nothing.
    Assumes CPU is the only limit and scales linearly: a projection, not a measurement."""
    hashing_ms = hashes * ms_per_hash / requests if requests else 0.0
    app_ms = max(0.0, server_cpu_ms_per_request - hashing_ms)
    per_request = app_ms + HASHES_PER_CYCLE / REQUESTS_PER_CYCLE * ms_per_hash
    usable = cores if parallel is None else min(cores, parallel)
    return {
        "cores": cores,
        "usable_cores": usable,
        "app_cpu_ms_per_request": round(app_ms, 2),
        "cpu_ms_per_request": round(per_request, 2),
        "qps": round(usable * 1000 / per_request, 0) if per_request else None,
    }
