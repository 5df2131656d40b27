"""A run's raw data, kept compressed beside its report, and every figure of the report made again
from it: on the recorded windows of stage 6 from the run of 2026-11-25 16:38 (tests/fixtures/bench-run,
their seconds given to the millisecond, as the load shape now records them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tools.bench import raw
from tools.bench.__main__ import main

FIXTURE = Path(__file__).parent / "fixtures" / "bench-run"


def a_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    return folder


def capacity_row(folder: Path) -> str:
    return next(line for line in (folder / "RESULTS.md").read_text().splitlines() if line.startswith("| 6 vertical |"))


def test_every_figure_of_the_report_is_made_again_from_the_raw_data(tmp_path, capsys):
    folder = a_copy(tmp_path)
    assert main(["--recompute", str(folder)]) == 0
    assert "0 line(s) of" in capsys.readouterr().out
    assert "| 500 | **504.5** (1 window) |" in capacity_row(folder)


def test_raw_data_that_says_otherwise_gives_other_figures_and_says_which(tmp_path, capsys):
    folder = a_copy(tmp_path)
    files = raw.unpacked(folder)
    searched = json.loads(files["stage6-steps.json"])
    at_500 = next(step for step in searched["steps"] if step["users"] == 500)
    at_500["by_request"]["POST /"]["failures"] = 1  # one login refused in the capacity step's window
    at_500["failures"] += 1
    files["stage6-steps.json"] = json.dumps(searched).encode()
    (folder / raw.ARCHIVE).write_bytes(raw.archive_of(files))
    assert main(["--recompute", str(folder)]) == 1
    assert "recomputed differently" in capsys.readouterr().out
    assert "| 450 | **461.8** (1 window) |" in capacity_row(folder), "the capacity is the step below it now"


def test_the_repeats_at_the_capacity_step_are_judged_again_too(tmp_path):
    folder = a_copy(tmp_path)
    files = raw.unpacked(folder)
    searched = json.loads(files["stage6-steps.json"])
    at_500 = next(step for step in searched["steps"] if step["users"] == 500)
    slower = {**at_500, "requests": 28_000, "met": True}
    at_500["repeats"] = [slower, {**slower, "requests": 29_000}]
    files["stage6-steps.json"] = json.dumps(searched).encode()
    again = raw.recompute(json.loads((folder / "results.json").read_text()), files)
    step = next(s for s in again["stages"][0]["steps"] if s["users"] == 500)
    assert [w["rps"] for w in step["repeats"]] == [
        round(28_000 / at_500["window_s"], 1),
        round(29_000 / at_500["window_s"], 1),
    ]


def test_packing_keeps_the_windows_and_csvs_and_leaves_the_logs_out(tmp_path):
    folder = tmp_path / "run"
    (folder / "raw").mkdir(parents=True)
    kept = ["stage6_stats.csv", "stage6-steps.json", "stage6-cold.json", "stage6-ceiling.json"]
    for name in [*kept, "stage6-locust.log", "stage6-steps.tmp"]:
        (folder / "raw" / name).write_text("x" * 10_000)
    archive = raw.pack(folder)
    assert sorted(raw.unpacked(folder)) == sorted(kept)
    assert archive.stat().st_size < 2_000, "compressed"


def test_the_cold_start_and_the_herd_are_made_again_from_their_windows():
    def window(timelines, failures=0, **extra):
        by_request = {"GET /tweets/": {"requests": timelines, "failures": failures, "p95_ms": 40, "max_ms": 90}}
        return {"window_s": 10.0, "requests": timelines, "failures": failures, "p95_ms": 40, "max_ms": 90,
                "server_cpu_ms_per_request": 2.0, "by_request": by_request, **extra}  # fmt: skip

    cold = {
        "state": "done",
        "users": 100,
        "windows": [window(1000), window(1200), window(1100)],
        "herd": {"users": 200, **window(900, failures=50)},
        "recovery": [window(1000, failures=3, ended_s_after_return=10.0), window(1000, ended_s_after_return=20.0)],
    }
    row = {"stage": 6, "part": None, "steps": [], "cold_start": {"state": "complete"}}
    again = raw.recompute({"bar": None, "stages": [row]}, {"stage6-cold.json": json.dumps(cold).encode()})
    found = again["stages"][0]["cold_start"]
    assert found["cold"]["windows_met"] == 3 and found["cold"]["tasks_per_s"]["median"] == 110.0
    assert found["herd_figures"]["goodput_pct_of_capacity"] == round(100 * 85.0 / 110.0, 1)
    assert found["herd_figures"]["recovered_after_s"] == 20.0, "the first window back that met the bar"


def test_each_herd_is_made_again_from_its_own_windows_and_their_medians_from_them():
    def window(timelines, failures=0, **extra):
        by_request = {"GET /tweets/": {"requests": timelines, "failures": failures, "p95_ms": 40, "max_ms": 90}}
        return {"window_s": 10.0, "requests": timelines, "failures": failures, "p95_ms": 40, "max_ms": 90,
                "server_cpu_ms_per_request": 2.0, "by_request": by_request, **extra}  # fmt: skip

    def herd(timelines, back_after):
        recovery = [window(1000, failures=3, ended_s_after_return=10.0)]
        recovery += [window(1000, ended_s_after_return=s) for s in back_after]
        return {"herd": {"users": 200, **window(timelines)}, "recovery": recovery, "figures": {"stale": True}}

    cold = {
        "state": "done",
        "users": 100,
        "windows": [window(1000)] * 3,
        "herds": [herd(900, [20.0]), herd(1100, []), herd(1000, [20.0])],
    }
    row = {"stage": 6, "part": None, "steps": [], "cold_start": {"state": "complete"}}
    again = raw.recompute({"bar": None, "stages": [row]}, {"stage6-cold.json": json.dumps(cold).encode()})
    found = again["stages"][0]["cold_start"]
    each = [h["figures"] for h in found["herds"]]
    assert [h["goodput_pct_of_capacity"] for h in each] == [90.0, 110.0, 100.0]
    assert [h["recovered_after_s"] for h in each] == [20.0, None, 20.0], "the second never met the bar"
    assert found["herd_figures"]["goodput_pct_of_capacity"] == 100.0
    assert found["herd_figures"]["recovered_after_s"] == 20.0
    assert found["herd"]["users"] == 200


def test_the_cold_start_at_the_targets_load_is_made_again_from_its_own_files():
    timelines = {"requests": 900, "failures": 0, "p95_ms": 40, "max_ms": 90}
    window = {"window_s": 10.0, **timelines, "server_cpu_ms_per_request": 2, "by_request": {"GET /tweets/": timelines}}
    cold = {"state": "done", "users": 100, "windows": [window], "recovery": []}
    target = {"state": "stopped", "users": 80, "windows": [window, window], "recovery": []}
    row = {"stage": 6, "part": None, "steps": [], "cold_start": {"state": "complete"}}
    files = {"stage6-cold.json": json.dumps(cold).encode(), "stage6-cold-target.json": json.dumps(target).encode()}
    found = raw.recompute({"bar": None, "stages": [row]}, files)["stages"][0]
    assert (found["cold_start"]["users"], found["cold_start"]["state"]) == (100, "complete")
    at_target = found["cold_start_at_target"]
    assert (at_target["users"], at_target["cold"]["windows"], at_target["state"]) == (80, 2, "cut short")
