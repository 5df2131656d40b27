"""What a full bench run publishes: ``results/LATEST.md`` and the blocks between the bench
markers of the top-level README, ``stages/README.md`` and each stage's README."""

from __future__ import annotations

from pathlib import Path

from tools import stages
from tools.bench.charts import chart_name
from tools.bench.deployment import deployment_sentence
from tools.bench.figures import cpu_ms_per_hash, hash_library
from tools.bench.headline import typical_window
from tools.bench.runs import (
    RESULTS,
    ROOT,
    bar_of,
    capacity_cell,
    capacity_of_row,
    ceiling_cell,
    ms,
    p95_of,
    run_label,
    served_text,
    slowest_cell,
    talk_figure,
    talk_qps,
)
from tools.bench.split import part_of
from tools.bench.tables import made_by, other_machines, readme_summary, summary
from tools.protocol import SHOWN

README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


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
    if report.get("composed"):  # a ladder composed of parts compares across them by ratios alone
        whole = [r for r in whole if r["run"]["date"] == result["run"]["date"]]
    before = [r for r in whole if r["stage"] < result["stage"]][-1:]
    parts = [r for r in report["stages"] if r["stage"] == result["stage"] and r.get("part")]
    return [*before, *parts, result]


def beside_measured(estimate: float, measured: float | None) -> str:
    """An estimated figure, with the measured one in brackets where there is one."""
    return f"{estimate:.2f}" + (f" ({measured:.2f} measured)" if measured else "")


def qps_of(result: dict) -> float | None:
    """The QPS at the bar a row's table shows (the median of its windows there), or None."""
    capacity = capacity_of_row(result) or {}
    return (capacity.get("rps") or {}).get("median")


def times(value: float | None, before: float | None) -> str:
    """``value`` as a multiple of ``before``: how much a step changed a figure, whatever the host's speed."""
    return "—" if not value or not before else f"×{value / before:.2f}"


def beside_table(report: dict, result: dict) -> list[str]:
    """The step against the one before it, from the same run: QPS at the bar (and as a multiple of the step
    before's, ours and the talk's), what logins and timelines waited, and its server CPU a request read
    aloud (how much of it is bcrypt), with the talk's figure."""
    lines = [
        "| stage | run | QPS at the bar | × the step before | users | p95 log in ms | p95 timeline ms "
        "| server CPU ms/req | of it bcrypt | the rest | the talk | the talk, × its step before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = neighbours(report, result)
    first = rows[0] if rows[0]["stage"] < result["stage"] else None
    before_qps, before_talk = (qps_of(first), talk_qps(first)) if first else (None, None)
    for r in rows:
        b, c = typical_window(r["best"]), capacity_of_row(r) or {}
        bound = r["run"].get("bcrypt")
        cpu = b.get("server_cpu_ms_per_request")
        hashing = None
        if cpu is not None and bound and b.get("hashes") is not None and b.get("requests"):
            hashing = b["hashes"] * cpu_ms_per_hash(bound, hash_library(r)) / b["requests"]
        threads = b.get("hashing_threads_cpu_ms_per_request")
        compared = first is not None and r is not first
        cells = [
            f"{r['stage']} {r['name']}" + (" (this step)" if r is result else ""),
            run_label(r),
            capacity_cell(r),
            times(qps_of(r), before_qps) if compared else "—",
            str(c.get("users", "—")),
            p95_of(c, SHOWN[0][0]),
            p95_of(c, "GET /tweets/"),
            "—" if cpu is None else f"{cpu:.2f}",
            "—" if hashing is None else beside_measured(hashing, threads),
            "—" if hashing is None else beside_measured(cpu - hashing, threads and cpu - threads),
            talk_figure(r),
            times(talk_qps(r), before_talk) if compared else "—",
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
    b, c = typical_window(result["best"]), capacity_of_row(result)
    if not c or result["search"]["state"] == "crashed":
        return f"{capacity_cell(result)}: no step to report ({where}; [all figures]({link})).\n{image}"
    shown = ", ".join(f"{label} {p95_of(c, key)}" for key, label in SHOWN)
    overload = result.get("overload")
    past = (
        f" Past capacity, at {overload['users']} users: {overload.get('goodput_tasks_per_s', '—')} tasks/s got "
        f"through ({overload.get('goodput_pct_of_capacity', '—')}% of the capacity's), {served_text(overload)} of "
        f"its users got one through, {100 * (overload['failure_share'] or 0):.1f}% of requests failed."
        if overload
        else ""
    )
    rejudged = (
        " Re-judged with the per-request-type bar from what that run recorded."
        if result["search"].get("rejudged")
        else ""
    )
    text = (
        f"{capacity_cell(result)} QPS at {c['users']} locust users, the median of its windows meeting the bar "
        f"({bar_of(report).text()}): p95 {c['p95_ms']:.0f} ms for all requests ({shown}; slowest "
        f"{slowest_cell(c)}); {c['server_cpu_ms_per_request'].get('median')} ms of server CPU a request; "
        "peak server memory "
        f"{ms(b.get('peak_server_memory_mb'))} MiB; stack ceiling (requests/s on `/healthz`): {ceiling_cell(result)}."
        f"{past}{rejudged} On {where}; [all figures]({link}).\n{image}"
    )
    if result.get("part"):
        return text
    elsewhere = other_machines(neighbours(report, result), m)
    # Only a step that spreads over nodes says what its hosts would be: on one host, the projection is its cores.
    deployment = "\n" + deployment_sentence(result) + "\n" if result.get("nodes", 1) > 1 else ""
    table = "\n".join(beside_table(report, result))
    return text + "\n" + table + "\n\n" + " ".join([BESIDE_NOTE, *elsewhere]) + "\n" + deployment


# The columns are defined once, in the glossary, rather than under every stage's table.
BESIDE_NOTE = (
    "What the columns mean, and where the talk's figures come from: "
    "[the glossary](../../docs/glossary.md#the-measured-table)."
)


def chart_of(report: dict, result: dict, folder: Path) -> str:
    """Where a row's chart is, under results/: in its run's folder or, composed of parts, in its part's,
    which drew it."""
    part = part_of(report, result)
    return f"{Path(part['folder']).name if part else folder}/{chart_name(result)}"


def measured_every_stage(report: dict) -> bool:
    """Whether this run itself (or, composed of parts, its parts) measured every stage of the ladder and
    every part of a step: a row kept from an earlier run, or a stage left out, makes it a partial run."""
    ladder = {(each.number, each.part) for stage in stages.all_stages() for each in (*stage.parts(), stage)}
    own = {report["date"], *(part["date"] for part in (report.get("composed") or {}).get("parts", []))}
    measured = {(r["stage"], r.get("part")) for r in report["stages"] if r["run"]["date"] in own}
    return ladder <= measured


def publish(report: dict, folder: Path, root: Path = ROOT) -> None:
    """results/LATEST.md, the README, stages/README.md and each stage's README show this run, which
    must have measured every stage (a normalized report): figures of a partial run stay in its folder."""
    if not measured_every_stage(report):
        raise ValueError(f"{folder.name} did not measure every stage: a partial run never publishes")
    results, ladder_folder = root / RESULTS.relative_to(ROOT), root / stages.STAGES.relative_to(ROOT)
    relative = folder.relative_to(results)
    (results / "LATEST.md").write_text(
        f"# Latest benchmark: [{relative}]({relative}/RESULTS.md)\n\n"
        + "\n".join(summary(report, f"{relative}/chart.png"))
        + "\n"
    )
    replace_block(root / "README.md", "\n".join(readme_summary(report, f"results/{relative}/chart.png")))
    composed = bool(report.get("composed"))
    ratio = f" ÷ its part's stage {report['composed']['control']} |" if composed else ""
    ladder = [
        "| stage | run | QPS at the bar | users | p95 ms: all | log in | slowest request type | server CPU ms/req |"
        + ratio,
        "|---|---|---|---|---|---|---|---|" + ("---|" if composed else ""),
    ]
    for result in report["stages"]:
        stage = stages.get_stage(result["stage"])
        c = capacity_of_row(result) or {}
        name = stage.folder.name + (f", {result['part']}" if result.get("part") else "")
        cells = [name, run_label(result), capacity_cell(result), str(c.get("users", "—"))]
        cells += [
            ms(c.get("p95_ms")),
            p95_of(c, SHOWN[0][0]),
            slowest_cell(c),
            str((c.get("server_cpu_ms_per_request") or {}).get("median", "—")),
        ]
        if composed:
            cells.append("—" if result.get("ratio_to_control") is None else f"{result['ratio_to_control']:.2f}")
        ladder.append("| " + " | ".join(cells) + " |")
        chart = f"../../results/{chart_of(report, result, relative)}"
        figures = stage_figures(report, result, f"../../results/{relative}/RESULTS.md", chart)
        replace_block(ladder_folder / stage.folder.name / "README.md", figures, result.get("part"))
    replace_block(
        ladder_folder / "README.md",
        f"Measured by `{made_by(report)}` ([details](../results/{relative}/RESULTS.md)); "
        f"bar: {bar_of(report).text()}:\n\n" + "\n".join(ladder),
    )
