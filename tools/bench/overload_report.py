"""The overload table of a bench report: the step past each stage's capacity, as its users felt it."""

from __future__ import annotations

from tools.bench.runs import ms, run_label, served_text


def refused_cell(overload: dict) -> str:
    refused = overload.get("refused_by_type") or {}
    return ", ".join(f"`{name}` {100 * r['share']:.0f}%" for name, r in refused.items()) or "none"


def overload_table(report: dict) -> list[str]:
    """Past capacity as users feel it: tasks that got through (a retry's login form is no task) against
    the capacity's, the users who got one through, and refusals by request type."""
    lines = [
        "| stage | run | users (spawn rate /s) | goodput tasks/s | % of the capacity's tasks/s | users served "
        "| refused, by request type | failed requests | successful req/s | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["stages"]:
        o = r.get("overload")
        if not o:
            why = "not measured" if "rejudged" not in r["search"] else "not measured (run predates it)"
            lines.append(f"| {r['stage']} {r['name']} | {run_label(r)} | {why} |" + " |" * 8)
            continue
        share = "—" if o.get("failure_share") is None else f"{100 * o['failure_share']:.1f}%"
        pct = o.get("goodput_pct_of_capacity")
        cells = [
            f"{r['stage']} {r['name']}",
            run_label(r),
            f"{o['users']} ({o.get('spawn_rate', '—')})",
            str(o.get("goodput_tasks_per_s", "—")),
            "—" if pct is None else f"{pct}% of {o.get('capacity_tasks_per_s')}",
            served_text(o),
            refused_cell(o),
            share,
            str(o["goodput_rps"]),
            ms(o.get("p95_ms")),
            ms(o.get("max_ms")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
