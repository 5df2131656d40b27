"""The cores each tier of a stage (nginx, the app nodes, PostgreSQL, Redis) would need for 1,000 QPS of
the protocol on hosts of its own, from the CPU a request each used at the best step: the report's tier
table, and the sentence a scaled-out stage's README shows. A projection, not a measurement."""

from __future__ import annotations

import math

from tools.bench.headline import typical_window
from tools.bench.runs import run_label

TARGET_QPS = 1000
APP_HOST_CORES = 4  # the app hosts a projection sizes: a common small cloud instance
TIER_NAMES = {"front": "nginx", "postgresql": "PostgreSQL", "redis": "Redis"}


def cores_for(tiers: dict[str, float], qps: int = TARGET_QPS) -> dict[str, float]:
    """The cores each tier would keep busy at ``qps``: its CPU a request times the rate, no headroom."""
    return {name: ms_per_request * qps / 1000 for name, ms_per_request in tiers.items()}


def app_hosts(cores: dict[str, float], host_cores: int = APP_HOST_CORES) -> int:
    """How many app hosts of ``host_cores`` cores carry the app tier's share of ``cores``."""
    return max(1, math.ceil(cores.get("app", 0) / host_cores))


def tier_table(report: dict) -> list[str]:
    """CPU a request in each tier (front, app nodes, database server) at the best step, and the cores
    each would need for 1K QPS of the protocol on hosts of its own: a projection from that CPU alone."""
    rows = []
    for r in report["stages"]:
        tiers = typical_window(r.get("best")).get("tier_cpu_ms_per_request")
        if not tiers:
            continue
        cells = ", ".join(f"{name} {value:.2f}" for name, value in tiers.items())
        cores = cores_for(tiers)
        projected = ", ".join(f"{name} {value:.1f}" for name, value in cores.items())
        hosts = f"; app hosts of {APP_HOST_CORES} cores: {app_hosts(cores)}" if "app" in cores else ""
        rows.append(f"| {r['stage']} {r['name']} | {run_label(r)} | {cells} | {projected}{hosts} |")
    if not rows:
        return []
    return [
        "",
        f"CPU a request by tier at the best step, and the cores each tier would need for {TARGET_QPS:,} QPS of the "
        "protocol on hosts of its own (a projection: CPU a request times the rate, no headroom, generator elsewhere).",
        "",
        "| stage | run | CPU ms a request by tier | projected cores for 1K QPS |",
        "|---|---|---|---|",
        *rows,
    ]


def deployment_sentence(result: dict) -> str:
    """A scaled-out stage's 1K QPS deployment, in words, from the CPU a request of each tier at its best step."""
    tiers = typical_window(result.get("best")).get("tier_cpu_ms_per_request") or {}
    if "app" not in tiers:
        return ""
    cores = cores_for(tiers)
    others = ", ".join(f"{TIER_NAMES.get(name, name)} {value:.1f}" for name, value in cores.items() if name != "app")
    return (
        f"For {TARGET_QPS:,} QPS of the protocol, this CPU a request projects {cores['app']:.1f} cores of app "
        f"nodes ({app_hosts(cores)} hosts of {APP_HOST_CORES} cores), and {others} cores beside them (CPU a request "
        "times the rate, no headroom, the load generator elsewhere; the network between hosts is not in it)."
    )
