"""``make cold``: cold starts and herds of stages at equal users, run in turn, tabled from their windows."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest

from tools.bench import cold_ab
from tools.bench.runs import RESULTS

PUBLISHED = RESULTS / "2026-11-27-2310-stage4-vs-6-cold-start"


def test_the_published_stage_4_against_6_table_is_what_cold_ab_makes_of_its_windows():
    runs = json.loads((PUBLISHED / "cold.json").read_text())
    published = [line for line in (PUBLISHED / "README.md").read_text().splitlines() if line.startswith("|")]
    assert cold_ab.table(runs) == published


def test_a_window_missed_shows_its_failures_and_the_count_of_those_met():
    windows = [{"met": False, "failures": 14}, {"met": True, "failures": 0}, {"met": False, "failures": 0}]
    assert cold_ab.windows_text(windows) == "1/3: missed (14 failed) met missed (0 failed)"


@pytest.fixture
def events(tmp_path, monkeypatch):
    """What a cold-ab run did, in order, with the servers, the probe and the measuring faked."""
    measured = json.loads((PUBLISHED / "cold.json").read_text())[0]["cold"]
    events = []

    @contextlib.contextmanager
    def served(plan, stage, master):
        events.append(f"start {stage.number}")
        yield SimpleNamespace(stage=stage), None
        events.append(f"stop {stage.number}")

    def cold_start(plan, running, raw, users):
        events.append(f"cold start {running.stage.number} at {users}")
        return measured

    def probe(cost, seconds):
        events.append("probe")
        return {"libraries": {"pyca": {"hashes_per_s": 8.0}, "libxcrypt": {"hashes_per_s": 9.5}}}

    monkeypatch.setattr(cold_ab, "stop_cleanly_on_sigterm", lambda: None)
    monkeypatch.setattr(cold_ab, "bcrypt_bound", probe)
    monkeypatch.setattr(cold_ab, "git_commit", lambda: "abc1234")
    monkeypatch.setattr(cold_ab, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(cold_ab.serving, "WORK", tmp_path / "work")
    monkeypatch.setattr(cold_ab.serving, "seeded_master", lambda plan: tmp_path / "seed.sqlite3")
    monkeypatch.setattr(cold_ab.serving, "served", served)
    monkeypatch.setattr(cold_ab.measure, "measure_cold_start", cold_start)
    return events


def test_the_stages_run_in_turn_each_started_afresh_after_the_host_is_probed(tmp_path, events):
    out = tmp_path / "out"

    assert cold_ab.main(["--stages", "6 4", "--users", "500", "--repeat", "2", "--out", str(out)]) == 0

    one_run = ["probe", "start {0}", "cold start {0} at 500", "stop {0}"]
    assert events == [event.format(n) for n in (6, 4, 6, 4) for event in one_run]
    runs = json.loads((out / "cold.json").read_text())
    assert [(run["run"], run["stage"], run["users"]) for run in runs] == [
        (1, 6, 500),
        (2, 4, 500),
        (3, 6, 500),
        (4, 4, 500),
    ]
    readme = (out / "README.md").read_text()
    assert readme.startswith("# Cold starts of stages 6 and 4 at equal users, interleaved\n")
    assert "Run in the order 6, 4, 6, 4" in readme and "commit abc1234" in readme
    assert (
        "| 2 | 4 | 8 / 9.5 | 2/3: missed (89 failed) met met | 294.7 (235.3-311.0) | 1600 | 1300 | 5.36 "
        "| 44.2% | never |" in readme
    )


def test_one_stage_run_again_is_titled_as_its_runs(tmp_path, events):
    out = tmp_path / "out"
    assert cold_ab.main(["--stages", "6", "--users", "560", "--repeat", "3", "--out", str(out)]) == 0
    assert (out / "README.md").read_text().startswith("# Cold starts of stage 6, 3 runs at 560 users\n")


def test_a_run_behind_a_network_delay_says_so(tmp_path, events, monkeypatch):
    monkeypatch.setenv("TWEEPY_BENCH_NETWORK_DELAY_MS", "1")
    out = tmp_path / "out"
    assert cold_ab.main(["--stages", "7", "--users", "250", "--repeat", "1", "--out", str(out)]) == 0
    assert "1 ms of network each way to PostgreSQL and Redis" in (out / "README.md").read_text()


def test_a_quick_run_stays_out_of_results(tmp_path, events):
    assert cold_ab.main(["--stages", "6", "--users", "10", "--repeat", "1", "--quick"]) == 0
    assert (tmp_path / "work" / "quick-cold" / "README.md").exists()
    assert not (tmp_path / "results").exists()
    assert events == ["probe", "start 6", "cold start 6 at 10", "stop 6"]
