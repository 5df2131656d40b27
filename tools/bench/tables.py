"""The tables of a run's ``RESULTS.md``, and the summary the READMEs show.

Figures that depend on a run's own bcrypt probe (the share of the bcrypt bound, the
projections) are grouped by run, so no column mixes two runs' bounds.
"""

from __future__ import annotations

from tools import stages
from tools.bench.cold_report import cold_start_table
from tools.bench.deployment import tier_table
from tools.bench.figures import (
    PROJECTED_CORES,
    cpu_ms_per_hash,
    hash_library,
    probe_of,
    projection,
    protocol_qps_bound,
)
from tools.bench.headline import share_of_bound, typical_window
from tools.bench.overload_report import overload_table
from tools.bench.plan import command_of
from tools.bench.runs import (
    bar_of,
    capacity_cell,
    capacity_of_row,
    ceiling_cell,
    ms,
    p95_of,
    run_label,
    slowest_cell,
    talk_figure,
)
from tools.bench.split import part_reports, ratio_table
from tools.protocol import HASHES_PER_CYCLE, REQUESTS_PER_CYCLE, SHOWN

# --- RESULTS.md ----------------------------------------------------------------------------------


def made_by(report: dict) -> str:
    """The command that makes this run again (its settings spelt out where they are not the defaults)."""
    return command_of(report["plan"], [s.number for s in stages.all_stages()])


def header(report: dict) -> list[str]:
    m, plan, g = report["machine"], report["plan"], report.get("generator") or {}
    where = (
        f"on {g.get('host', m['host'])}, the same machine as the servers"
        if g.get("same_machine_as_servers", True)
        else f"on {g.get('host')}"
    )
    processes = g.get("processes", plan.get("locust_processes", 1))
    return [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, Python {m['python']}. "
        f"Load generator: locust, {processes} process(es), {where} "
        "(its share of the CPU, and its CPU a request, are in each row).",
        f"Data: {plan['users']:,} users, {plan['tweets']:,} tweets, {plan['follows']} follows each. "
        f"bcrypt cost {report['bcrypt']['cost']}. "
        f"Window {plan['window_s']:g} s a step, after every user has logged in. "
        f"Bar: {bar_of(report).text()}, judged on each step's ramp and window alike. "
        f"This run: {report['date']}, commit {report['commit']}, made by `{made_by(report)}`; "
        "every row names its own run.",
        *([REJUDGED] if any(r["search"].get("rejudged") for r in report["stages"]) else []),
        *other_machines(report["stages"], report["machine"]),
        *network_lines(report),
    ]


def machine_of(m: dict) -> str:
    return f"{m['cpu']}, {m['cores']} cores, {m['os']}"


def other_machines(rows: list[dict], here: dict) -> list[str]:
    """Which of these rows, kept from earlier runs, ran on a machine other than ``here``: their milliseconds
    and QPS then differ with the host as well as the code, so they compare with the rest only as ratios."""
    here, elsewhere = machine_of(here), {}
    for r in rows:
        machine = (r.get("run") or {}).get("machine")
        if machine and machine_of(machine) != here:
            elsewhere.setdefault(run_label(r), machine_of(machine))
    if not elsewhere:
        return []
    runs = "; ".join(f"the run of {label}: {machine}" for label, machine in elsewhere.items())
    return [
        f"Rows from another machine: {runs}. Compare those with the other rows as ratios within each run "
        "(the generator's CPU a request changes only with the host), not figure against figure."
    ]


def network_lines(report: dict) -> list[str]:
    """What the delay relays added between the app and its database and cache, where the run had them."""
    delayed = [r for r in report["stages"] if r.get("network")]
    if not delayed:
        return []
    parts = [
        f"{r['stage']} {r['name']}: {r['network']['round_trip_ms']} ms a round trip to Redis "
        f"({r['network']['delay_ms_each_way']:g} ms added each way), the relays using {r['network']['relay_cpu_s']} "
        "s of CPU over the search"
        for r in delayed
    ]
    return [
        "Network: PostgreSQL and Redis answered through delay relays (`tools/netdelay.py`), as if on other hosts; "
        "their CPU is not the servers' and is not in any row. " + "; ".join(parts) + "."
    ]


def capacity_table(report: dict) -> list[str]:
    """One row a stage at its capacity step: medians of the windows measured there, with their spread."""
    shown = " | ".join(f"{label} `{key}`" for key, label in SHOWN)
    lines = [
        f"| stage | run | users | QPS at the bar | of the bcrypt bound | p95 ms: all | {shown} | slowest request type "
        "| server CPU ms/req | peak server MiB | stack ceiling req/s | generator CPU |",
        "|" + "---|" * (12 + len(SHOWN)),
    ]
    for r in report["stages"]:
        b, c = typical_window(r["best"]), capacity_of_row(r) or {}
        ceiling = ceiling_cell(r)
        if c and r["ceiling"].get("rps"):
            ceiling = f"{100 * c['rps']['median'] / r['ceiling']['rps']:.1f}% of {ceiling}"
        share = share_of_bound(c["rps"]["median"], r["run"].get("bcrypt"), hash_library(r)) if c else None
        cells = [
            f"{r['stage']} {r['name']}",
            run_label(r),
            str(c.get("users", "—")),
            capacity_cell(r),
            "—" if share is None else f"{100 * share:.0f}%",
            ms(c.get("p95_ms")),
            *(p95_of(c, key) for key, _ in SHOWN),
            slowest_cell(c),
            str((c.get("server_cpu_ms_per_request") or {}).get("median", "—")),
            ms(b.get("peak_server_memory_mb")),
            ceiling,
            generator_cell(b),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def generator_cell(step: dict) -> str:
    """The generator's share of the machine, and its CPU a request: the same locust code sending the same
    requests in every run, so a host that is slower at this kind of work shows there first."""
    if "generator_cpu_share" not in step:
        return "—"
    share = f"{100 * step['generator_cpu_share']:.0f}%"
    per_request = step.get("generator_cpu_ms_per_request")
    if per_request is None and step.get("generator_cpu_cores") is not None and step.get("rps"):
        per_request = 1000 * step["generator_cpu_cores"] / step["rps"]  # runs made before it was recorded
    return share if per_request is None else f"{share}, {per_request:.2f} ms/req"


def runs_of(report: dict) -> list[tuple[str, list[dict]]]:
    """The stages grouped by the run they came from, newest first."""
    grouped: dict[str, list[dict]] = {}
    for r in report["stages"]:
        grouped.setdefault(run_label(r), []).append(r)
    return sorted(grouped.items(), reverse=True)


def parallel_processes(result: dict) -> int | None:
    """How many cores the stage can keep busy at once (None: as many as there are, whatever their number).

    A process runs Python on one core at a time; with gevent and hashing on native threads, its
    HASHING_SLOTS threads hash on other cores beside it."""
    settings = result.get("settings") or {}
    if result.get("server", settings.get("TWEEPY_SERVER", "dev")) == "dev":
        return 1  # the development server is one process: one core at most, with the GIL
    processes = str(result.get("processes_setting") or settings.get("TWEEPY_PROCESSES", "4"))
    if processes == "auto":
        return None
    hashing_threads = 0
    if int(settings.get("TWEEPY_GEVENT", "0") or 0) and settings.get("TWEEPY_BCRYPT_IN_THREADPOOL") == "true":
        hashing_threads = int(settings.get("TWEEPY_HASHING_SLOTS", "1"))
    return int(processes) * (1 + hashing_threads)


def projection_cells(result: dict, bound: dict) -> list[str]:
    b = typical_window(result["best"])
    if not b or b.get("server_cpu_ms_per_request") is None or b.get("hashes") is None:
        return ["—"] * (3 + len(PROJECTED_CORES))
    library = hash_library(result)
    per_hash = cpu_ms_per_hash(bound, library)
    parallel = parallel_processes(result)
    seconds = b.get("window_s") or 1
    projected = [
        projection(b["server_cpu_ms_per_request"], b["hashes"], b["requests"], per_hash, n, parallel)
        for n in PROJECTED_CORES
    ]
    hashing_ms = b["server_cpu_ms_per_request"] - projected[0]["app_cpu_ms_per_request"]
    # Where hashing has threads of its own, their CPU is measured too: the probe's cost a hash is
    # what one costs with every core hashing, which the window's hashes need not match.
    threads = b.get("hashing_threads_cpu_ms_per_request")
    measured = f"; {threads:.2f} in its hashing threads" if threads else ""
    return [
        f"{b['hashes'] / seconds:.2f} ({b['hashes']} in {seconds:g} s)",
        f"{100 * b['hashes'] / seconds / probe_of(bound, library)['hashes_per_s']:.1f}%",
        f"{b['server_cpu_ms_per_request']} ({hashing_ms:.2f} hashing{measured})",
        *(
            f"{p['qps']:.0f}" + (f" ({p['usable_cores']} usable)" if p["usable_cores"] < p["cores"] else "")
            for p in projected
        ),
    ]


def bound_tables(report: dict) -> list[str]:
    lines = []
    cores = " | ".join(f"projection: {n} cores" for n in PROJECTED_CORES)
    for label, results in runs_of(report):
        bound = results[0]["run"].get("bcrypt")
        lines.append("")
        if not bound:
            lines.append(f"Run of {label}: its bcrypt probe is not recorded, so nothing here is computed against it.")
            continue
        others = [
            f"{name} {probe['hashes_per_s']} hashes/s ({probe['cpu_ms_per_hash']:.1f} ms), for the stages that "
            f"hash with it (`TWEEPY_BCRYPT_LIBRARY={name}`)"
            for name, probe in (bound.get("libraries") or {}).items()
            if name != "pyca"
        ]
        lines += [
            f"Run of {label}: bcrypt bound {bound['hashes_per_s']} hashes/s on {bound['cores']} cores "
            f"({cpu_ms_per_hash(bound):.1f} ms of CPU a hash), so at most "
            f"{protocol_qps_bound(bound['hashes_per_s']):.0f} QPS of the protocol "
            f"({HASHES_PER_CYCLE} hashes per {REQUESTS_PER_CYCLE} requests) if the machine did nothing else"
            + (f"; {'; '.join(others)}." if others else "."),
            "",
            "| stage | hashes/s counted in the window | % of this run's bound (its library's) "
            f"| server CPU ms/req | {cores} | the talk (measured) |",
            "|" + "---|" * (5 + len(PROJECTED_CORES)),
        ]
        for r in results:
            cells = [f"{r['stage']} {r['name']}", *projection_cells(r, bound), talk_figure(r)]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def steps_table(report: dict) -> list[str]:
    bar = bar_of(report)
    lines = [
        "| stage | users | spawn rate /s | ramp s | first-login p95 ms | QPS | p95 ms | slowest request type "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["stages"]:
        search = r["search"]
        name = f"{r['stage']} {r['name']}"
        for step in r["steps"]:
            verdict = "met" if step.get("met_bar") else "missed: " + "; ".join(step.get("reasons") or ["?"])
            lines.append(_step_row(name, str(step["users"]), step, verdict))
            for again in step.get("repeats") or []:
                lines.append(_step_row(name, f"{step['users']} (again)", again, "met" if again["met"] else "missed"))
        if r.get("overload"):
            o = r["overload"]
            summary = f"past capacity: goodput {o.get('goodput_tasks_per_s', '—')} tasks/s"
            lines.append(_step_row(name, f"{o['users']} (overload)", o, summary))
        state = search["state"] + (f": {search['note']}" if search.get("note") else "")
        if search.get("ended"):
            state += f" ({search['ended']})"
        if search.get("rejudged"):
            state += f" (re-judged with the bar: {bar.text()})"
        lines.append(f"| {name} | search {state} | | | | | | | |")
    return lines


def _step_row(name: str, users: str, step: dict, verdict: str) -> str:
    cells = [
        name,
        users,
        str(step.get("spawn_rate", "—")),
        str(step.get("ramp_s", "—")),
        ms(step.get("first_login_p95_ms")),
        str(step.get("rps", "—")),
        ms(step.get("p95_ms")),
        slowest_cell(step),
        verdict,
    ]
    return "| " + " | ".join(cells) + " |"


REJUDGED = (
    "Runs from before the per-request-type bar are re-judged with it from what they recorded: each window's "
    "per-type stats and each ramp's first logins (the other requests of their ramps were not recorded, and they "
    "had no overload step); a stage's capacity is its last step before the first one that misses."
)
NOTES = (
    "QPS at the bar (the capacity, one definition for every table, the chart and the overload share): the "
    "median, over the windows measured at it, of the requests a second of the highest step (users) whose ramp "
    "and first window met the bar and whose windows' median meets it too, before the first step that missed; "
    "its spread (lowest-highest) and how many windows it rests on beside it; ≥ when the search could not say "
    "more. Of the bcrypt bound: that QPS against the run's own probe (its library's hashes a second x 247/3). "
    "p95 of all requests and of each request type: their medians over those windows; slowest request type: the "
    "highest of them among those with enough requests to be judged. Server CPU: user + system time of the dev "
    "server, or of nginx and "
    "uWSGI with all their processes, divided by the requests served. Stack ceiling: the same generator asking "
    "the stage's servers for `/healthz` with no think time; a lower bound when the generator, or the machine, "
    "was the bottleneck. Generator CPU: the load generator's share of the whole machine, and its CPU a request: "
    "the same code sends the same requests in every run, so it shows how fast the host was at such work (between "
    "runs of one stage, the server's CPU a request outside bcrypt moves with it). Hashes are counted from "
    "the window's own successful logins and registrations, and their CPU is those hashes at the probe's cost; "
    "where a stage hashes on threads of its own (`tweepy-hash`), the CPU those threads took in the window is "
    "measured too and shown beside it. Projections are not measurements: the window's server "
    f"CPU a request without its counted hashes, plus {HASHES_PER_CYCLE} hashes every {REQUESTS_PER_CYCLE} "
    "requests at the probe's cost, spread over that many cores (no more than the stage runs at once: 1 for the "
    "development server, its uWSGI processes otherwise), with the load generator on another machine and CPU as "
    "the only limit."
)


# The chart of a ladder composed of parts: each stage against its own part's control.
COMPOSED_CHART = "![Each stage against its part's control]({})"


def summary(report: dict, chart_link: str) -> list[str]:
    """What a run's RESULTS.md and results/LATEST.md show: the header, capacity, overload and bound tables,
    notes and chart; for a ladder composed of parts, the ratios to each part's control, then each part's
    own tables."""
    if not report.get("composed"):
        return [*one_run(report), "", NOTES, "", f"![QPS per stage]({chart_link})"]
    lines = ratio_table(report)
    for part, own in part_reports(report):
        host = part["machine"]["host"]
        lines += ["", f"### Part {part['part']}: run of {part['date']} on {host}, commit {part['commit']}", ""]
        lines += one_run(own)
    return [*lines, "", NOTES, "", COMPOSED_CHART.format(chart_link)]


def readme_summary(report: dict, chart_link: str) -> list[str]:
    """What the top-level README shows: the whole summary, or of a ladder composed of parts its ratios and
    chart, with each part's own tables left to results/LATEST.md."""
    if not report.get("composed"):
        return summary(report, chart_link)
    return [
        *ratio_table(report),
        "",
        "Each part's own tables (capacity, past capacity, cold start and herd, the tiers, the bcrypt bound) "
        "are in [`results/LATEST.md`](results/LATEST.md).",
        "",
        COMPOSED_CHART.format(chart_link),
    ]


def one_run(report: dict) -> list[str]:
    """The tables of one run's rows: capacity, overload, cold start, tiers and the bcrypt bound."""
    return [
        *header(report),
        "",
        *capacity_table(report),
        "",
        "Past capacity: one more step at twice the capacity's users (bounded), measured the same way, to see "
        "whether the server keeps serving or collapses, counted as its users feel it: protocol tasks that got "
        "through (a page read, a post, a follow, a login), not the login forms fetched again by refused users.",
        "",
        *overload_table(report),
        *([""] + cold if (cold := cold_start_table(report)) else []),
        *tier_table(report),
        *bound_tables(report),
    ]


def markdown(report: dict) -> str:
    return "\n".join(
        [
            f"# tweepy benchmark, {report['date']}",
            "",
            *summary(report, "chart.png"),
            "",
            "## Every step",
            "",
            "Each step: its ramp (how long its new users took to log in, and how slow those first logins were), "
            "then its window. A step meets the bar only if both did.",
            "",
            *steps_table(report),
            "",
        ]
    )
