"""A full run in parts: what each part measures, and one ladder composed of two made-up parts from
two hosts, each stage read as a ratio to the control measured in its own part, published only when
the parts measured every stage between them."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict

import pytest
from test_bench import a_checkout, a_report, a_stage, files_of

from tools import stages
from tools.bench import plan, report, runs, split

EVERY = [s.number for s in stages.all_stages()]


def test_a_part_is_k_of_n_parts_and_nothing_else():
    assert split.parse_split("1/2") == (1, 2) and split.parse_split("3/3") == (3, 3)
    for wrong in ("0/2", "3/2", "1/1", "half", "1/", "1/2/3"):
        with pytest.raises(ValueError, match="expected k/n"):
            split.parse_split(wrong)


def test_each_part_measures_its_share_of_the_ladder_and_the_control_stage():
    assert split.part_stages(EVERY, "1/2") == [0, 1, 2, 3, 4]
    assert split.part_stages(EVERY, "2/2") == [4, 5, 6, 7]
    first = [(s.number, s.part) for s in split.measured_in_part(split.part_stages(EVERY, "1/2"), "1/2")]
    assert first == [(0, None), (1, None), (2, None), (3, "indexes"), (3, None), (4, None)], (
        "the control is measured whole, not its parts"
    )
    second = [(s.number, s.part) for s in split.measured_in_part(split.part_stages(EVERY, "2/2"), "2/2")]
    assert second[:3] == [(4, "reads"), (4, "timelines"), (4, None)]


def test_what_is_read_only_for_its_capacity_skips_the_overload_step_and_the_cold_start():
    from tools.bench.__main__ import plan_for

    def plan_of_part(k: int, n: int = 4) -> plan.Plan:
        part = plan.make_plan(split.part_stages(EVERY, f"{k}/{n}"), False, {})
        part.split = f"{k}/{n}"
        return part

    whole = (plan.Plan([]).overload, plan.Plan([]).cold_windows)
    control, indexes = stages.get_stage(split.CONTROL), stages.get_stage(3).parts()[0]
    assert split.CONTROL not in split.own_share(EVERY, 1, 4) and split.CONTROL in split.own_share(EVERY, 3, 4)
    for alone in (plan_for(plan_of_part(1), control), plan_for(plan.make_plan([3], False, {}), indexes)):
        assert (alone.overload, alone.cold_windows, alone.capacity_windows) == (0, 0, plan.Plan([]).capacity_windows)
    for stage, part in ((control, plan_of_part(3)), (stages.get_stage(0), plan_of_part(1))):
        assert (plan_for(part, stage).overload, plan_for(part, stage).cold_windows) == whole
    unsplit = plan.make_plan([split.CONTROL], False, {})
    assert plan_for(unsplit, control) is unsplit


def test_a_part_names_the_command_that_makes_it_and_its_folder():
    from datetime import datetime

    from tools.bench.__main__ import results_folder

    part = plan.make_plan(split.part_stages(EVERY, "1/2"), False, {})
    part.split = "1/2"
    assert plan.command_of(asdict(part), EVERY) == "make bench SPLIT=1/2"
    assert results_folder(part, datetime(2026, 11, 26, 2, 0)).name.endswith("-part-1-of-2")


def test_a_split_chooses_its_own_stages(capsys):
    from tools.bench.__main__ import parse

    with pytest.raises(SystemExit):
        parse(["--split", "1/2", "--stages", "6"])
    assert "--split chooses its own stages" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["--split", "2/1"])
    assert parse(["--split", "2/2"]).split == "2/2"


# --- two made-up parts, from two hosts --------------------------------------------------------------


def at(row: dict, rps: float) -> dict:
    """The row with its capacity step measured at ``rps``."""
    row = copy.deepcopy(row)
    row["steps"][1]["rps"] = rps
    row["best"] = row["steps"][1]
    return row


def a_part(k: int, host: str, date: str, commit: str, speed: float) -> dict:
    """Part k of 2 on ``host``: its share of the stages, each at 100 QPS a stage number times ``speed``."""
    run = {"date": date, "commit": commit, "bcrypt": a_report()["bcrypt"]}
    run["machine"] = {**a_report()["machine"], "host": host}
    numbers = split.part_stages(EVERY, f"{k}/2")
    rows = [
        at(a_stage(s.number, s.name + (f", {s.part}" if s.part else ""), run=run, part=s.part), speed * (s.number + 1))
        for s in split.measured_in_part(numbers, f"{k}/2")
    ]
    part = a_report(*rows)
    part.update(date=date, commit=commit, machine=run["machine"])
    part["plan"] = {**part["plan"], "split": f"{k}/2", "stages": numbers}
    return part


PART_1 = ("fast-host", "2026-11-26 01:00 UTC", "aaa1111", 100.0)
PART_2 = ("slow-host", "2026-11-27 01:00 UTC", "bbb2222", 50.0)


def composed() -> dict:
    parts = [a_part(2, *PART_2), a_part(1, *PART_1)]  # in any order
    return split.compose(parts, ["results/p2", "results/p1"], "2026-11-27 09:00 UTC", "ccc3333")


def test_two_parts_compose_one_ladder_of_ratios_to_each_parts_own_control():
    ladder = composed()
    assert [(r["stage"], r.get("part")) for r in ladder["stages"]] == [
        (each.number, each.part) for stage in stages.all_stages() for each in (*stage.parts(), stage)
    ], "every stage once, stage 4 from the part whose share it is"
    by_stage = {(r["stage"], r.get("part")): r for r in ladder["stages"]}
    # Stage 2 on the fast host (300 QPS) against that host's stage 4 (500); stage 6 on the slow host
    # (350) against its own stage 4 (250): the raw figures say 300 < 350, the ratios 0.6 < 1.4.
    assert by_stage[(2, None)]["ratio_to_control"] == 0.6
    assert by_stage[(6, None)]["ratio_to_control"] == 1.4
    assert by_stage[(4, None)]["run"]["date"] == PART_2[1]
    assert [(p["part"], p["machine"]["host"], p["commit"]) for p in ladder["composed"]["parts"]] == [
        ("1/2", "fast-host", "aaa1111"),
        ("2/2", "slow-host", "bbb2222"),
    ]


def test_the_composed_table_names_each_parts_host_and_commit_and_shows_raw_figures_only_beside_its_control():
    text = "\n".join(split.ratio_table(runs.normalize(composed())))
    assert "| 2 parallelize | 1/2 (fast-host, aaa1111, 2026-11-26 01:00 UTC) | **0.60** | 300.0 | 500.0 |" in text
    assert "| 6 vertical | 2/2 (slow-host, bbb2222, 2026-11-27 01:00 UTC) | **1.40** | 350.0 | 250.0 |" in text


def test_a_composed_ladder_that_measured_every_stage_publishes_with_each_parts_tables_apart(tmp_path):
    root = a_checkout(tmp_path)
    folder = root / "results" / "run"
    folder.mkdir()
    assert report.write_reports(json.loads(json.dumps(composed())), folder, root=root)
    latest = files_of(root)["results/LATEST.md"]
    assert "÷ its part's stage 4" in latest
    first, second = latest.index("### Part 1/2"), latest.index("### Part 2/2")
    # Part 1's raw table holds its own control, stage 4 at 500 QPS, and none of part 2's rows.
    assert "| 4 cache | 2026-11-26 01:00 UTC, aaa1111 | 200 | **500.0**" in latest[first:second]
    assert "| 6 vertical |" not in latest[first:second] and "| 6 vertical |" in latest[second:]
    assert "| 4 cache | 2026-11-27 01:00 UTC, bbb2222 | 200 | **250.0**" in latest[second:]
    ladder = files_of(root)["stages/README.md"]
    assert "| 1.40 |" in ladder and "--compose results/p1 results/p2" in ladder
    readme = files_of(root)["README.md"]
    assert "| **1.40** | 350.0 | 250.0 |" in readme and "### Part" not in readme, "the parts' tables: in LATEST.md"


def test_a_composed_ladder_draws_no_stage_again_and_shows_each_from_its_own_part(tmp_path):
    root = a_checkout(tmp_path)
    folder = root / "results" / "run"
    folder.mkdir()
    assert report.write_reports(json.loads(json.dumps(composed())), folder, root=root)
    assert sorted(p.name for p in folder.glob("*.png")) == ["chart.png"], "each part has drawn its own stages"
    pages = files_of(root)
    assert "](../../results/p2/stage-6.png)" in pages["stages/6-vertical/README.md"]
    assert "](../../results/p1/stage-3-indexes.png)" in pages["stages/3-database/README.md"]


def test_parts_that_left_a_stage_out_never_publish(tmp_path):
    root = a_checkout(tmp_path)
    before = files_of(root)
    short = composed()
    short["stages"] = [r for r in short["stages"] if r["stage"] != 7]
    folder = root / "results" / "run"
    folder.mkdir()
    assert not report.write_reports(short, folder, root=root)
    assert files_of(root) == before


def test_a_part_alone_never_publishes(tmp_path):
    root = a_checkout(tmp_path)
    folder = root / "results" / "part"
    folder.mkdir()
    assert not report.write_reports(a_part(1, *PART_1), folder, root=root)


def on_cpu(part: dict, cpu: str) -> dict:
    return {**part, "machine": {**part["machine"], "cpu": cpu}}


@pytest.mark.parametrize(
    "parts, refusal",
    [
        (lambda: [a_part(1, *PART_1), a_part(1, *PART_2)], "expected each of 1/2 .. 2/2 once"),
        (lambda: [a_part(1, *PART_1), {**a_part(2, *PART_2), "bar": {"max_p95_ms": 5000}}], "another plan or bar"),
        (lambda: [a_part(1, *PART_1), {**a_report(), "plan": {}}], "must be a part of a split run"),
        (lambda: [a_part(1, *PART_1), on_cpu(a_part(2, *PART_2), "Intel Xeon")], "one ladder needs one kind"),
    ],
)
def test_parts_that_do_not_make_one_ladder_are_refused_in_words(parts, refusal):
    with pytest.raises(ValueError, match=refusal):
        split.compose(parts(), ["a", "b"], "now", "ccc3333")


def test_a_part_whose_control_has_no_capacity_is_refused():
    second = a_part(2, *PART_2)
    control = next(r for r in second["stages"] if (r["stage"], r.get("part")) == (4, None))
    control["search"] = {"state": "cut short", "note": "locust exited"}
    with pytest.raises(ValueError, match="control stage 4 has no capacity"):
        split.compose([a_part(1, *PART_1), second], ["a", "b"], "now", "ccc3333")
