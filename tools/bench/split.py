"""A full run in parts, for when the ladder cannot be measured in one sitting: part ``k/n``
(``--split``) measures its share of the stages and a control stage, the same stage in every
part (for its capacity only, where it is not the part's own share); ``compose`` makes one ladder
of the parts, each stage read as a ratio to the control measured in its own part, since parts may
come from different hosts or hours, though of one kind (CPU and cores: how a stage fares against
the control moves with it). A composed report publishes only when, across its parts, every stage
was measured (``publishing``)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from tools import stages
from tools.bench.headline import capacity_of
from tools.bench.runs import bar_of, in_ladder_order, normalize

CONTROL = 4  # the cache step: in the middle of the ladder, and quick to search
SAME_IN_EVERY_PART = ("users", "tweets", "follows", "steps", "window_s", "bcrypt_cost", "quick")


def parse_split(text: str) -> tuple[int, int]:
    """``"1/2"`` as (1, 2); anything else is refused in words."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n) and int(n) >= 2):
        raise ValueError(f"--split {text!r}: expected k/n, a part k of n >= 2 parts, as 1/2")
    return int(k), int(n)


def own_share(every: list[int], k: int, n: int) -> list[int]:
    """The stages part ``k`` of ``n`` answers for: consecutive stages of the ladder, in near-equal shares."""
    size = math.ceil(len(every) / n)
    return every[(k - 1) * size : k * size]


def part_stages(every: list[int], split: str, control: int = CONTROL) -> list[int]:
    """What part ``split`` measures: its own share, and the control stage when that share lacks it."""
    k, n = parse_split(split)
    return sorted({*own_share(every, k, n), control})


def measured_in_part(numbers: Iterable[int], split: str, control: int = CONTROL) -> list:
    """The stages and parts of steps to measure: those of its share, and the control stage whole."""
    every = [s.number for s in stages.all_stages()]
    k, n = parse_split(split)
    share = own_share(every, k, n)
    chosen = []
    for number in numbers:
        stage = stages.get_stage(number)
        chosen += [*stage.parts(), stage] if number in share else [stage] if number == control else []
    return chosen


def control_alone(stage: stages.Stage, split: str, control: int = CONTROL) -> bool:
    """Whether part ``split`` measures ``stage`` only as its control, outside its own share: ``compose`` reads
    nothing of it but its capacity."""
    every = [s.number for s in stages.all_stages()]
    return stage.number == control and not stage.part and control not in own_share(every, *parse_split(split))


def control_of(report: dict, control: int = CONTROL) -> dict | None:
    """The control stage's capacity headline in this part, or None if it has none to compare with."""
    rows = [r for r in report["stages"] if r["stage"] == control and not r.get("part")]
    if not rows or rows[0]["search"]["state"] != "complete":
        return None
    return capacity_of(rows[0]["steps"], bar_of(report))[1]


def _kind_of_host(report: dict) -> str:
    machine = report["machine"]
    return f"{machine['cpu']} with {machine['cores']} cores"


def compose(parts: list[dict], folders: list[str], date: str, commit: str) -> dict:
    """One ladder from the results of parts ``1/n`` .. ``n/n``: each stage from the part whose share it is,
    with its part's control beside it. Parts that do not make one ladder are refused in words."""
    splits = [(p.get("plan") or {}).get("split") or "" for p in parts]
    if not all(splits):
        raise ValueError("every report composed must be a part of a split run (--split k/n)")
    numbered = sorted(zip((parse_split(s) for s in splits), parts, folders, strict=True), key=lambda x: x[0])
    n = numbered[0][0][1]
    if [kn for kn, _, _ in numbered] != [(k, n) for k in range(1, n + 1)]:
        raise ValueError(f"the parts are {', '.join(splits)}: expected each of 1/{n} .. {n}/{n} once")
    _, first, first_folder = numbered[0]
    first_host = _kind_of_host(first)
    for _, part, folder in numbered[1:]:
        differing = [key for key in SAME_IN_EVERY_PART if part["plan"].get(key) != first["plan"].get(key)]
        if differing or part.get("bar") != first.get("bar"):
            raise ValueError(f"{folder} was measured with another plan or bar ({', '.join(differing) or 'bar'})")
        if (host := _kind_of_host(part)) != first_host:
            raise ValueError(
                f"{folder} ran on {host}, {first_folder} on {first_host}: "
                "a stage's ratio to the control moves with the kind of host, so one ladder needs one kind"
            )
    every = [s.number for s in stages.all_stages()]
    rows, described = [], []
    for (k, _), part, folder in numbered:
        part = normalize(part)
        control = control_of(part)
        if control is None:
            raise ValueError(f"{folder}: its control stage {CONTROL} has no capacity to compare with")
        control_row = next(r for r in part["stages"] if r["stage"] == CONTROL and not r.get("part"))
        described.append({key: part[key] for key in ("date", "commit", "machine", "generator", "bcrypt", "plan")})
        described[-1].update(part=f"{k}/{n}", folder=folder, control=control, control_row=control_row)
        for row in part["stages"]:
            if row["stage"] in own_share(every, k, n):
                capacity = row.get("capacity")
                ratio = round(capacity["rps"]["median"] / control["rps"]["median"], 3) if capacity else None
                rows.append({**row, "ratio_to_control": ratio})
    plan = {**first["plan"], "stages": every, "split": "", "composed": [d["folder"] for d in described]}
    return {
        "date": date,
        "commit": commit,
        "machine": first["machine"],
        "generator": first.get("generator"),
        "plan": plan,
        "bar": first.get("bar"),
        "bcrypt": first["bcrypt"],
        "composed": {"control": CONTROL, "parts": described},
        "stages": rows,
    }


def part_of(report: dict, row: dict) -> dict | None:
    """The part of a composed report a row was measured in."""
    parts = (report.get("composed") or {}).get("parts") or []
    return next((p for p in parts if p["date"] == row["run"]["date"]), None)


def ratio_table(report: dict) -> list[str]:
    """The composed ladder: each stage as a ratio to its own part's control, its raw figure only beside it."""
    composed = report["composed"]
    lines = [
        f"One ladder from {len(composed['parts'])} parts, each measuring its share of the stages and stage "
        f"{composed['control']} as a control in the same run: compare stages by their ratio to their own part's "
        "control, not by raw QPS, since the parts ran at different times or on different hosts.",
        "",
        f"| stage | part (host, commit, run) | QPS at the bar ÷ its part's stage {composed['control']} "
        f"| QPS at the bar | its part's stage {composed['control']} |",
        "|---|---|---|---|---|",
    ]
    for row in report["stages"]:
        part = part_of(report, row) or {}
        control = (part.get("control") or {}).get("rps") or {}
        capacity = (row.get("capacity") or {}).get("rps") or {}
        ratio = row.get("ratio_to_control")
        cells = [
            f"{row['stage']} {row['name']}",
            f"{part.get('part', '?')} ({part.get('machine', {}).get('host', '?')}, {part.get('commit')}, "
            f"{part.get('date')})",
            "—" if ratio is None else f"**{ratio:.2f}**",
            str(capacity.get("median", "—")),
            str(control.get("median", "—")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def part_reports(report: dict) -> list[tuple[dict, dict]]:
    """Each part of a composed report as a report of its own rows, its control among them, for the tables
    that show raw figures: those are only ever read beside the control measured in the same run."""
    out = []
    for part in report["composed"]["parts"]:
        rows = [r for r in report["stages"] if r["run"]["date"] == part["date"]]
        if not any((r["stage"], r.get("part")) == (CONTROL, None) for r in rows):
            rows = sorted([*rows, part["control_row"]], key=in_ladder_order)
        own = {key: part[key] for key in ("date", "commit", "machine", "generator", "bcrypt", "plan")}
        out.append((part, {**report, **own, "composed": None, "stages": rows}))
    return out
