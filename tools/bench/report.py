"""What a bench run reports: ``RESULTS.md`` and ``chart.png`` in its folder, and, for a full run,
the blocks between the bench markers of the top-level README, ``stages/README.md`` and each
stage's README, and ``results/LATEST.md``.

Every row names the run (date) and commit it came from; figures that depend on a run's own
bcrypt probe (the share of the bcrypt bound, the projections) are grouped by run, so no column
mixes two runs' bounds. A search that was cut short or crashed says so instead of showing its last
passing step as the stage's capacity, and results written before the per-type bar existed are
re-judged with it from what they recorded (see :func:`normalize`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import stages
from tools.bench.cold_report import cold_start_table
from tools.bench.figures import (
    PROJECTED_CORES,
    cpu_ms_per_hash,
    hash_library,
    plain_stats,
    probe_of,
    projection,
    protocol_qps_bound,
)
from tools.bench.plan import command_of
from tools.protocol import (
    AGGREGATED,
    FIRST_LOGIN_KEY,
    HASHES_PER_CYCLE,
    REQUESTS_PER_CYCLE,
    SHOWN,
    Bar,
    RequestStats,
    hashes_done,
    misses,
    slowest,
)

ROOT = stages.ROOT
RESULTS = ROOT / "results"
STAGES_README = stages.STAGES / "README.md"
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"
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
    return report


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
    """Judge a step of an old run with the per-type bar; the capacity is the step before the first miss."""
    best, missed_before = None, False
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
        if found:
            missed_before = True
        elif not missed_before:
            best = step
    result["best"] = best


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


def capacity_cell(result: dict) -> str:
    """The stage's QPS at the bar, or why there is none to trust."""
    search, best = result["search"], result["best"]
    if search["state"] == "crashed":
        return f"crashed: {search.get('note', '')}"
    if best is None:
        first = result["steps"][0]["users"] if result["steps"] else "?"
        return f"— (missed at {first} users)"
    if search["state"] == "cut short":
        return f"≥ {best['rps']} (search cut short)"
    if search.get("ended", "").startswith("every step met"):
        return f"≥ {best['rps']} (every step met the bar)"
    return f"**{best['rps']}**"


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
    shown = " | ".join(f"{label} `{key}`" for key, label in SHOWN)
    lines = [
        f"| stage | run | users | QPS at the bar | p95 ms: all | {shown} | slowest request type "
        "| server CPU ms/req | peak server MiB | stack ceiling req/s | generator CPU |",
        "|" + "---|" * (11 + len(SHOWN)),
    ]
    for r in report["stages"]:
        b = r["best"] or {}
        ceiling = ceiling_cell(r)
        if b and r["ceiling"].get("rps"):
            ceiling = f"{100 * b['rps'] / r['ceiling']['rps']:.1f}% of {ceiling}"
        cells = [
            f"{r['stage']} {r['name']}",
            run_label(r),
            str(b.get("users", "—")),
            capacity_cell(r),
            ms(b.get("p95_ms")),
            *(p95_of(b, key) for key, _ in SHOWN),
            slowest_cell(b),
            str(b.get("server_cpu_ms_per_request", "—")),
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


def overload_table(report: dict) -> list[str]:
    lines = [
        "| stage | run | users | goodput req/s | % of the best step's QPS | failed requests | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["stages"]:
        o = r.get("overload")
        if not o:
            why = "not measured" if "rejudged" not in r["search"] else "not measured (run predates it)"
            lines.append(f"| {r['stage']} {r['name']} | {run_label(r)} | {why} | | | | | |")
            continue
        share = "—" if o.get("failure_share") is None else f"{100 * o['failure_share']:.1f}%"
        pct = "—" if o.get("goodput_pct_of_capacity") is None else f"{o['goodput_pct_of_capacity']}%"
        lines.append(
            f"| {r['stage']} {r['name']} | {run_label(r)} | {o['users']} | {o['goodput_rps']} | {pct} of "
            f"{o.get('capacity_rps', '—')} | {share} | {ms(o.get('p95_ms'))} | {ms(o.get('max_ms'))} |"
        )
    return lines


TARGET_QPS = 1000


def tier_table(report: dict) -> list[str]:
    """CPU a request in each tier (front, app nodes, database server) at the best step, and the cores
    each would need for 1K QPS of the protocol on hosts of its own: a projection from that CPU alone."""
    rows = []
    for r in report["stages"]:
        b = r.get("best") or {}
        tiers = b.get("tier_cpu_ms_per_request")
        if not tiers:
            continue
        cells = ", ".join(f"{name} {value:.2f}" for name, value in tiers.items())
        cores = {name: value * TARGET_QPS / 1000 for name, value in tiers.items()}
        nodes = ""
        if "app" in cores and r.get("processes"):
            per_node = max(1, r["processes"] // max(1, r.get("nodes", 1)))
            nodes = f"; app nodes of {per_node} cores: {max(1, round(cores['app'] / per_node + 0.49))}"
        projected = ", ".join(f"{name} {value:.1f}" for name, value in cores.items())
        rows.append(f"| {r['stage']} {r['name']} | {run_label(r)} | {cells} | {projected}{nodes} |")
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
    b = result["best"]
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
        "| stage | users | ramp s | first-login p95 ms | QPS | p95 ms | slowest request type | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["stages"]:
        search = r["search"]
        name = f"{r['stage']} {r['name']}"
        for step in r["steps"]:
            verdict = "met" if step.get("met_bar") else "missed: " + "; ".join(step.get("reasons") or ["?"])
            lines.append(_step_row(name, str(step["users"]), step, verdict))
        if r.get("overload"):
            o = r["overload"]
            summary = f"past capacity: goodput {o['goodput_rps']} req/s"
            lines.append(_step_row(name, f"{o['users']} (overload)", o, summary))
        state = search["state"] + (f": {search['note']}" if search.get("note") else "")
        if search.get("ended"):
            state += f" ({search['ended']})"
        if search.get("rejudged"):
            state += f" (re-judged with the bar: {bar.text()})"
        lines.append(f"| {name} | search {state} | | | | | | |")
    return lines


def _step_row(name: str, users: str, step: dict, verdict: str) -> str:
    cells = [
        name,
        users,
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
    "QPS at the bar: requests a second in the measured window of the highest step (users) whose ramp and "
    "window both met the bar, before the first step that missed; ≥ when the search could not say more. "
    "p95 of all requests and of each request type in that window; slowest request type: the highest p95 among "
    "those with enough requests to be judged. Server CPU: user + system time of the dev server, or of nginx and "
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


def summary(report: dict, chart_link: str) -> list[str]:
    """What the READMEs show: the header, capacity, overload and bound tables, notes and chart."""
    return [
        *header(report),
        "",
        *capacity_table(report),
        "",
        "Past capacity: one more step at twice the best step's users (bounded), measured the same way, to see "
        "whether the server keeps serving or collapses.",
        "",
        *overload_table(report),
        *([""] + cold if (cold := cold_start_table(report)) else []),
        *tier_table(report),
        *bound_tables(report),
        "",
        NOTES,
        "",
        f"![QPS per stage]({chart_link})",
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


def chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bar = bar_of(report)
    results = report["stages"]
    fig, (ladder, curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['stage']}\n{r['name']}" for r in results]
    qps = [r["best"]["rps"] if r["best"] else 0 for r in results]
    p95 = [r["best"]["p95_ms"] if r["best"] else float("nan") for r in results]
    ladder.bar(labels, qps, color="#1d7fc4")
    ladder.tick_params(axis="x", labelsize=8)
    ladder.set_ylabel("QPS meeting the bar")
    ladder.set_title("The ladder")
    for x, (value, r) in enumerate(zip(qps, results, strict=True)):
        mark = "" if r["search"]["state"] == "complete" else " (cut short)"
        ladder.annotate(f"{value:.0f}{mark}", (x, value), ha="center", va="bottom", fontsize=9)
    slowest_p95 = [(r["best"] or {}).get("slowest_p95_ms") or float("nan") for r in results]
    latency = ladder.twinx()
    latency.plot(labels, p95, color="#c0392b", marker="o", label="all requests")
    latency.plot(labels, slowest_p95, color="#c0392b", marker="x", linestyle="--", label="slowest request type")
    latency.set_ylabel("p95 ms at that step", color="#c0392b")
    latency.legend(loc="upper left", fontsize=8)

    top = max(results, key=lambda r: r["best"]["rps"] if r["best"] else -1)
    steps = [s for s in top["steps"] if "rps" in s] + ([top["overload"]] if top.get("overload") else [])
    curve.plot([s["users"] for s in steps], [s["rps"] for s in steps], color="#1d7fc4", marker="o")
    curve.set_xlabel("users")
    curve.set_ylabel("requests/s")
    curve.set_title(f"Stage {top['stage']} ({top['name']}): load against users")
    latency = curve.twinx()
    latency.plot([s["users"] for s in steps], [s["p95_ms"] for s in steps], color="#c0392b", marker="o")
    latency.axhline(bar.max_p95_ms, color="#c0392b", linestyle=":", linewidth=1)
    latency.set_ylabel(f"p95 ms (dotted: the bar, {bar.max_p95_ms:.0f} ms)", color="#c0392b")
    fig.suptitle(
        f"tweepy on {report['machine']['cores']} cores, bcrypt cost {report['bcrypt']['cost']}, {report['date']}; "
        f"bar: {bar.text()}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_name(result: dict) -> str:
    return f"stage-{result['stage']}" + (f"-{result['part']}" if result.get("part") else "") + ".png"


def stage_chart(report: dict, result: dict, path: Path) -> None:
    """One stage's steps: QPS and p95 (all requests, and the slowest type) against users, the talk's figure marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bar = bar_of(report)
    steps = [s for s in result["steps"] if "rps" in s]
    overload = result.get("overload") if (result.get("overload") or {}).get("rps") is not None else None
    fig, qps = plt.subplots(figsize=(6.4, 4))
    users = [s["users"] for s in steps]
    qps.plot(users, [s["rps"] for s in steps], color="#1d7fc4", marker="o", label="requests/s")
    met = [s for s in steps if s.get("met_bar")]
    qps.scatter([s["users"] for s in met], [s["rps"] for s in met], s=90, facecolors="none", edgecolors="#1d7fc4",
                label="met the bar")  # fmt: skip
    if overload:
        qps.scatter([overload["users"]], [overload["goodput_rps"]], color="#7f8c8d", marker="s",
                    label="goodput past capacity")  # fmt: skip
    talk = None if result.get("part") else TALK_QPS.get(result["stage"])
    if talk:
        qps.axhline(talk, color="#27ae60", linestyle="--", linewidth=1, label=f"the talk: {TALK[result['stage']]}")
    qps.set_xlabel("locust users")
    qps.set_ylabel("requests/s")
    qps.legend(loc="upper left", fontsize=7)
    latency = qps.twinx()
    every = steps + ([overload] if overload else [])
    latency.plot([s["users"] for s in every], [s["p95_ms"] for s in every], color="#c0392b", marker=".",
                 linewidth=1, label="p95, all requests")  # fmt: skip
    slowest = [(s["users"], s.get("slowest_p95_ms")) for s in every if s.get("slowest_p95_ms") is not None]
    latency.plot([u for u, _ in slowest], [v for _, v in slowest], color="#c0392b", marker="x", linestyle="--",
                 linewidth=1, label="p95, slowest request type")  # fmt: skip
    latency.axhline(bar.max_p95_ms, color="#c0392b", linestyle=":", linewidth=1)
    latency.set_yscale("log")
    latency.set_ylabel(f"p95 ms, log scale (dotted: the bar, {bar.max_p95_ms:.0f} ms)", color="#c0392b")
    latency.legend(loc="lower right", fontsize=7)
    qps.set_title(
        f"Stage {result['stage']} {result['name']}: {report['machine']['cores']} cores, bcrypt cost "
        f"{report['bcrypt']['cost']}, run of {result['run']['date']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- the READMEs -----------------------------------------------------------------------------------


def markers(part: str | None = None) -> tuple[str, str]:
    """The bench markers of a README: of the whole step, or of one of its parts."""
    return (
        (README_START, README_END) if part is None else (f"<!-- bench:{part}:start -->", f"<!-- bench:{part}:end -->")
    )


def replace_block(path: Path, block: str, part: str | None = None) -> None:
    """Put ``block`` between the bench markers of a Markdown file (appending them if missing)."""
    start, end = markers(part)
    text = path.read_text()
    if start not in text:
        text = text.rstrip() + f"\n\n{start}\n{end}\n"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{block.strip()}\n{end}{tail}")


def neighbours(report: dict, result: dict) -> list[dict]:
    """What a step is read beside: the step before it (whole), then its own parts, then itself."""
    whole = [r for r in report["stages"] if not r.get("part")]
    before = [r for r in whole if r["stage"] < result["stage"]][-1:]
    parts = [r for r in report["stages"] if r["stage"] == result["stage"] and r.get("part")]
    return [*before, *parts, result]


def beside_measured(estimate: float, measured: float | None) -> str:
    """An estimated figure, with the measured one in brackets where there is one."""
    return f"{estimate:.2f}" + (f" ({measured:.2f} measured)" if measured else "")


def beside_table(report: dict, result: dict) -> list[str]:
    """The step against the one before it, from the same run: QPS at the bar, what logins and timelines
    waited, and its server CPU a request read aloud (how much of it is bcrypt), with the talk's figure."""
    lines = [
        "| stage | run | QPS at the bar | users | p95 log in ms | p95 timeline ms | server CPU ms/req "
        "| of it bcrypt | the rest | the talk |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in neighbours(report, result):
        b = r["best"] or {}
        bound = r["run"].get("bcrypt")
        cpu = b.get("server_cpu_ms_per_request")
        hashing = None
        if cpu is not None and bound and b.get("hashes") is not None and b.get("requests"):
            hashing = b["hashes"] * cpu_ms_per_hash(bound, hash_library(r)) / b["requests"]
        threads = b.get("hashing_threads_cpu_ms_per_request")
        cells = [
            f"{r['stage']} {r['name']}" + (" (this step)" if r is result else ""),
            run_label(r),
            capacity_cell(r),
            str(b.get("users", "—")),
            p95_of(b, SHOWN[0][0]),
            p95_of(b, "GET /tweets/"),
            "—" if cpu is None else f"{cpu:.2f}",
            "—" if hashing is None else beside_measured(hashing, threads),
            "—" if hashing is None else beside_measured(cpu - hashing, threads and cpu - threads),
            talk_figure(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def stage_figures(report: dict, result: dict, link: str, picture: str | None = None) -> str:
    """What goes under a stage README's "Measured" heading, or under a part of the step's own heading,
    from the run the figures came from."""
    run = result["run"]
    m, plan = run.get("machine") or report["machine"], run.get("plan") or report["plan"]
    bound = run.get("bcrypt") or report["bcrypt"]
    where = (
        f"{m['cores']} cores ({m['cpu']}), bcrypt cost {bound['cost']}, {plan['users']:,} users and "
        f"{plan['tweets']:,} tweets seeded; run of {run['date']}, commit {run['commit']}"
    )
    image = f"\n![QPS and p95 against users, {result['stage']} {result['name']}]({picture})\n" if picture else ""
    b = result["best"]
    if not b or result["search"]["state"] == "crashed":
        return f"{capacity_cell(result)}: no step to report ({where}; [all figures]({link})).\n{image}"
    shown = ", ".join(f"{label} {p95_of(b, key)}" for key, label in SHOWN)
    overload = result.get("overload")
    past = (
        f" Past capacity, at {overload['users']} users: goodput {overload['goodput_rps']} requests/s "
        f"({overload['goodput_pct_of_capacity']}% of it), {100 * (overload['failure_share'] or 0):.1f}% failed."
        if overload
        else ""
    )
    rejudged = (
        " Re-judged with the per-request-type bar from what that run recorded."
        if result["search"].get("rejudged")
        else ""
    )
    text = (
        f"{capacity_cell(result)} QPS at {b['users']} locust users, meeting the bar "
        f"({bar_of(report).text()}): p95 {b['p95_ms']:.0f} ms for all requests ({shown}; slowest "
        f"{slowest_cell(b)}); {b['server_cpu_ms_per_request']} ms of server CPU a request; peak server memory "
        f"{ms(b.get('peak_server_memory_mb'))} MiB; stack ceiling (requests/s on `/healthz`): {ceiling_cell(result)}."
        f"{past}{rejudged} On {where}; [all figures]({link}).\n{image}"
    )
    if result.get("part"):
        return text
    elsewhere = other_machines(neighbours(report, result), m)
    return text + "\n" + "\n".join(beside_table(report, result)) + "\n\n" + " ".join([BESIDE_NOTE, *elsewhere]) + "\n"


# The columns are defined once, in the glossary, rather than under every stage's table.
BESIDE_NOTE = (
    "What the columns mean, and where the talk's figures come from: "
    "[the glossary](../../docs/glossary.md#the-measured-table)."
)


def publish(report: dict, folder: Path) -> None:
    """results/LATEST.md, the README, stages/README.md and each stage's README show this run."""
    relative = folder.relative_to(RESULTS)
    (RESULTS / "LATEST.md").write_text(
        f"# Latest benchmark: [{relative}]({relative}/RESULTS.md)\n\n"
        + "\n".join(summary(report, f"{relative}/chart.png"))
        + "\n"
    )
    replace_block(ROOT / "README.md", "\n".join(summary(report, f"results/{relative}/chart.png")))
    ladder = [
        "| stage | run | QPS at the bar | users | p95 ms: all | log in | slowest request type | server CPU ms/req |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in report["stages"]:
        stage = stages.get_stage(result["stage"])
        b = result["best"] or {}
        name = stage.folder.name + (f", {result['part']}" if result.get("part") else "")
        cells = [name, run_label(result), capacity_cell(result), str(b.get("users", "—"))]
        cells += [
            ms(b.get("p95_ms")),
            p95_of(b, SHOWN[0][0]),
            slowest_cell(b),
            str(b.get("server_cpu_ms_per_request", "—")),
        ]
        ladder.append("| " + " | ".join(cells) + " |")
        figures = stage_figures(
            report, result, f"../../results/{relative}/RESULTS.md", f"../../results/{relative}/{chart_name(result)}"
        )
        replace_block(stage.folder / "README.md", figures, result.get("part"))
    replace_block(
        STAGES_README,
        f"Measured by `{made_by(report)}` ([details](../results/{relative}/RESULTS.md)); "
        f"bar: {bar_of(report).text()}:\n\n" + "\n".join(ladder),
    )


def write_reports(report: dict, folder: Path, publish_it: bool) -> None:
    report = normalize(report)
    (folder / "RESULTS.md").write_text(markdown(report))
    chart(report, folder / "chart.png")
    for result in report["stages"]:
        if any("rps" in step for step in result["steps"]):
            stage_chart(report, result, folder / chart_name(result))
    if publish_it:
        publish(report, folder)
