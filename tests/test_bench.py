"""`make bench QUICK=1` end to end: every stage started, measured and reported.

This proves the pipeline (seeding, servers, locust, the capacity search, the
table and the chart) works; it asserts no speed: that is what `make bench` is for.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools import bench, stages

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--quick", "--out", str(out)],
        cwd=stages.ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout


def test_quick_bench_measures_every_stage_and_finds_each_meets_the_bar_at_low_load(quick_report):
    out, _ = quick_report
    report = json.loads((out / "results.json").read_text())
    assert [r["stage"] for r in report["stages"]] == [s.number for s in stages.all_stages()]
    for result in report["stages"]:
        best = result["best"]
        assert best is not None, f"stage {result['stage']} missed the bar at a handful of users: {result['steps']}"
        assert best["failures"] == 0 and best["requests"] > 0
        assert best["p95_ms"] < 2000
        assert best["server_cpu_ms_per_request"] > 0, "server CPU is read from /proc"
        assert best["peak_server_memory_mb"] > 0
        assert result["ceiling_rps"] > 0
        assert best["ramp_s"] >= 0 and best["login_p95_ms"] > 0, "the ramp's logins are reported apart"
    assert report["bcrypt"]["cost"] == 12, "the benchmark hashes at the app's default cost"
    assert report["bcrypt"]["protocol_qps_bound"] > 0


def test_quick_bench_writes_the_table_the_chart_and_raw_csvs(quick_report):
    out, stdout = quick_report
    table = (out / "RESULTS.md").read_text()
    for stage in stages.all_stages():
        assert f"| {stage.number} {stage.name} |" in table
    assert "bcrypt cost 12" in table
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((out / "raw").glob("stage*_stats.csv"))
    assert "stage 6 · step 1/1 · window" in stdout, "progress is shown while it runs"


def test_a_stage_that_misses_the_bar_at_its_first_step_is_reported_as_missed():
    report = {
        "date": "today", "commit": "abc", "machine": bench.machine(),
        "plan": {"users": 10, "tweets": 10, "follows": 1, "window_s": 60, "locust_processes": 1},
        "bcrypt": {"cost": 12, "cores": 2, "hashes_per_s": 7.0, "cpu_ms_per_hash": 280, "protocol_qps_bound": 555},
        "stages": [{"stage": 0, "name": "baseline", "steps": [{"users": 25, "met_bar": False}], "best": None, "ceiling_rps": 900}],
    }
    assert "| 0 baseline | — | missed at 25 users |" in bench.markdown(report)


def test_a_readme_block_between_the_bench_markers_is_replaced_and_the_rest_kept(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Stage\n\nText.\n")
    bench.replace_block(readme, "first run")
    bench.replace_block(readme, "second run")
    text = readme.read_text()
    assert text.startswith("# Stage\n\nText.\n")
    assert "second run" in text and "first run" not in text
    assert text.count(bench.README_START) == 1 and text.count(bench.README_END) == 1
