"""The cold start and herd table of a bench report: each stage started afresh at its capacity step's
users (the default stage once more at its targets' load), arriving briskly, then a herd and the way
back (``tools/bench/cold_shape.py`` measures it)."""

from __future__ import annotations

from tools.protocol import HASHING, LOG_IN, REGISTER


def p95_cell(summary: dict, name: str) -> str:
    """The median p95 of one request type over a cold start's windows, in ms, or a dash."""
    figure = summary["p95_ms"].get(name)
    return "—" if not figure else f"{figure['median']:.0f}"


def _pages_p95(summary: dict) -> str:
    pages = [f["median"] for name, f in summary["p95_ms"].items() if name not in HASHING and f]
    return f"{max(pages):.0f}" if pages else "—"


def herd_cells(herd: dict, never: str = "not within the limit", after: str = "") -> tuple[str, str]:
    """The herds' goodput and way back under the bar (``figures.herds_summary``, or one herd's figures):
    medians, followed by each herd's own when there were several."""
    pct, back = herd.get("goodput_pct_of_capacity"), herd.get("recovered_after_s")
    pct_cell = "—" if pct is None else f"{pct}%"
    back_cell = "—" if not herd else (never if back is None else f"{after}{back:g} s")
    goodput_each, back_each = herd.get("goodput_pct_each") or [], herd.get("recovered_after_s_each") or []
    if len(goodput_each) > 1 and pct is not None:
        known = [g for g in goodput_each if g is not None]
        pct_cell += f" ({min(known)}-{max(known)})"
    if len(back_each) > 1:
        back_cell += f" ({', '.join('never' if s is None else f'{s:g}' for s in back_each)})"
    return pct_cell, back_cell


def cold_start_table(report: dict) -> list[str]:
    """One row a cold start: its windows (medians, with the spread of QPS), then the herd."""
    share = report["plan"].get("target_share", 0.55)
    labels = {"cold_start": "", "cold_start_at_target": f", at {share:.0%} of its bcrypt bound"}
    measured = [(r, key) for r in report["stages"] for key in labels if r.get(key)]
    if not measured:
        return []
    rate = report["plan"].get("cold_rate", 5.0)
    herds = report["plan"].get("herds", 1)  # a run made before herds were repeated had one
    again = (
        f" {herds} herds, each after the last one's way back and a window at the users: their medians, the "
        "goodput's spread and each way back."
        if herds > 1
        else ""
    )
    lines = [
        f"Cold start: each stage started afresh (empty caches) and its capacity step's users arriving at "
        f"{rate:g} a second; once all have logged in, windows judged by the bar (medians, QPS with its spread). "
        "Then a herd: twice those users at once for a window, its goodput in completed tasks (a page read, "
        "a post, a follow, a login that got through) against the cold windows'; then the herd's newcomers "
        f"leave at once, and how long after that a window met the bar again.{again} The default stage, when its "
        f"capacity lies past it, is started afresh once more with as many users as {share:.0%} of its bcrypt "
        "bound in QPS (its own library's hashes a second x 247/3): the load its targets are written for.",
        "",
        "| stage | users | windows met | QPS | log in p95 ms | register p95 ms | slowest page p95 ms | failures "
        "| herd: users | tasks, % of capacity | back under the bar |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, key in measured:
        cold, stage = r[key], f"{r['stage']} {r['name']}{labels[key]}"
        summary, herd = cold.get("cold"), cold.get("herd_figures") or {}
        if not summary:
            lines.append(f"| {stage} | {cold.get('users')} | {cold.get('state')} | | | | | | | | |")
            continue
        qps = summary["rps"]
        pct_cell, back_cell = herd_cells(herd)
        lines.append(
            f"| {stage} | {cold['users']} | {summary['windows_met']}/{summary['windows']} "
            f"| {qps['median']:g} ({qps['min']:g}-{qps['max']:g}) | {p95_cell(summary, LOG_IN)} "
            f"| {p95_cell(summary, REGISTER)} | {_pages_p95(summary)} | {summary['failures']} "
            f"| {(cold.get('herd') or {}).get('users', '—')} | {pct_cell} | {back_cell} |"
        )
    return lines
