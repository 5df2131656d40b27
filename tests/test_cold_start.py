"""The bench's cold start and herd: the shape driven by made-up statistics and a made-up clock, the
figures it keeps (medians with their spread, goodput in completed tasks, the way back under the bar),
and the report's table of them."""

from __future__ import annotations

import pytest
from test_locustfile import FakeVisitor, driven, log_in, protocol, serve  # noqa: F401 (a fixture and fakes)

from tools import protocol as shared
from tools.bench import cold_report, figures


def cold_shape_with(herds: int, tmp_path, monkeypatch):
    """A ColdStartAndHerd of 10 users at 5 a second, two 30 s windows, herds of 20, 10 s recovery windows."""
    from tools.bench import cold_shape

    settings = {
        "TWEEPY_BENCH_COLD_USERS": "10",
        "TWEEPY_BENCH_COLD_RATE": "5",
        "TWEEPY_BENCH_COLD_WINDOWS": "2",
        "TWEEPY_BENCH_WINDOW": "30",
        "TWEEPY_BENCH_HERD": "2",
        "TWEEPY_BENCH_HERDS": str(herds),
        "TWEEPY_BENCH_RECOVERY_WINDOW": "10",
        "TWEEPY_BENCH_RECOVERY_LIMIT": "30",
        "TWEEPY_BENCH_OUT": str(tmp_path / "cold.json"),
    }
    return driven(cold_shape, cold_shape.ColdStartAndHerd, settings, monkeypatch)


@pytest.fixture
def cold(protocol, tmp_path, monkeypatch):  # noqa: F811
    """The cold start with one herd."""
    return cold_shape_with(1, tmp_path, monkeypatch)


@pytest.fixture
def cold_and_three_herds(protocol, tmp_path, monkeypatch):  # noqa: F811
    return cold_shape_with(3, tmp_path, monkeypatch)


def test_users_arrive_at_the_cold_rate_then_the_herd_all_at_once_then_back_to_the_users(cold):
    shape, later = cold
    assert later(0) == (10, 5.0)
    log_in(shape, 10)
    later(1)
    for _ in range(2):
        serve(shape, 300)
        assert later(30) in ((10, 5.0), (20, 20))
    assert shape.phase == "herd" and later(1) == (20, 20), "twice the users, all spawned at once"
    serve(shape, 500, failures=50)
    later(30)
    assert shape.phase == "recovery" and later(0) == (10, 20), "back to the users in one step"


def through_the_cold_windows(shape, later) -> list[FakeVisitor]:
    """Ten visitors arrive and log in, then the two cold windows serve 10 completed tasks a second each."""
    later(0)
    first = [FakeVisitor(shape.runner) for _ in range(10)]
    log_in(shape, 10)
    later(1)
    for _ in range(2):
        serve(shape, 300)
        later(30)
    return first


def test_the_herds_own_visitors_leave_when_it_ends_and_the_first_users_stay(cold):
    shape, later = cold
    first = through_the_cold_windows(shape, later)
    assert shape.phase == "herd"
    herd = [FakeVisitor(shape.runner) for _ in range(10)]  # what locust spawns on the herd's answer
    serve(shape, 500, failures=50)
    later(30)
    assert shape.phase == "recovery"
    assert [visitor.stopped_by_force for visitor in herd] == [True] * 10, "gone at once, mid-request if need be"
    assert [visitor.stopped_by_force for visitor in first] == [None] * 10
    assert shape.runner.user_greenlets == [visitor.greenlet for visitor in first]


def test_the_herd_is_over_when_a_window_after_it_meets_the_bar_and_says_how_long_that_took(cold):
    shape, later = cold
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)  # 10 completed tasks a second
    later(30)
    serve(shape, 300)
    later(30)
    serve(shape, 270, failures=30, p95=3000)  # the herd: 8 tasks a second got through
    later(30)
    serve(shape, 100, failures=1)  # still refusing
    later(10)
    serve(shape, 100)
    later(10)
    assert shape.state == "done" and later(1) is None
    herd = shape.result["herd_figures"]
    assert herd["goodput_pct_of_capacity"] == 80.0
    assert herd["recovered_after_s"] == 20.0
    assert shape.result["cold"]["windows_met"] == 2 and shape.result["cold"]["met"]


def test_a_stage_that_never_meets_the_bar_after_the_herd_is_said_not_to_recover(cold):
    shape, later = cold
    later(0)
    log_in(shape, 10)
    later(1)
    for _ in range(3):
        serve(shape, 300)
        later(30)
    for _ in range(3):
        serve(shape, 100, failures=5)
        later(10)
    assert shape.state == "done"
    assert shape.result["herd_figures"]["recovered_after_s"] is None


def test_herds_come_in_turn_each_after_the_last_is_back_and_a_window_and_their_figures_are_medians(
    cold_and_three_herds,
):
    shape, later = cold_and_three_herds
    first = through_the_cold_windows(shape, later)
    herds = ((270, 1), (240, 3), (285, 2))  # each herd's requests served, and its recovery windows that miss
    for number, (goodput, refusing_for) in enumerate(herds, start=1):
        assert shape.phase == "herd" and later(0) == (20, 20), "twice the users, all at once, every time"
        herd = [FakeVisitor(shape.runner) for _ in range(10)]
        serve(shape, goodput)
        later(30)
        assert [visitor.stopped_by_force for visitor in herd] == [True] * 10
        for _ in range(refusing_for):
            serve(shape, 100, failures=1)
            later(10)
        if refusing_for < 3:
            serve(shape, 100)
            later(10)
        if number < len(herds):  # a window at the users before the next herd
            assert shape.phase == "settle" and later(0) == (10, 20)
            serve(shape, 300)
            later(30)
    assert shape.state == "done" and later(1) is None
    assert [visitor.stopped_by_force for visitor in first] == [None] * 10, "the first users stayed throughout"
    each = [h["figures"] for h in shape.result["herds"]]
    assert [h["goodput_pct_of_capacity"] for h in each] == [90.0, 80.0, 95.0]
    assert [h["recovered_after_s"] for h in each] == [20.0, None, 30.0], "the second never met the bar in 30 s"
    summary = shape.result["herd_figures"]
    assert (summary["herds"], summary["goodput_pct_of_capacity"]) == (3, 90.0)
    assert summary["recovered_after_s"] == 30.0, "the median, a herd that never came back counted as the slowest"
    assert [len(h["recovery"]) for h in shape.result["herds"]] == [2, 3, 3], "each herd's windows kept apart"
    assert len(shape.result["settled"]) == 2 and all(w["met"] for w in shape.result["settled"])


def test_the_median_way_back_is_never_when_most_herds_never_came_back():
    herd = {"tasks_per_s": 9.0, "goodput_pct_of_capacity": 90.0, "failures": 0}
    times = [None, 20.0, None]
    summary = figures.herds_summary([{**herd, "recovered_after_s": s} for s in times])
    assert summary["recovered_after_s"] is None and summary["recovered_after_s_each"] == times
    two = figures.herds_summary([{**herd, "recovered_after_s": s} for s in (10.0, 40.0)])
    assert two["recovered_after_s"] == 40.0, "of two, the later: a figure that could be never is not averaged"


def test_only_the_request_that_completes_a_task_counts_as_a_completed_task():
    by_type = [
        shared.RequestStats("GET /", 50),  # the login form fetched again by someone refused: nothing done
        shared.RequestStats("POST /", 50, failures=40),
        shared.RequestStats("GET /tweets/", 100, failures=2),
        shared.RequestStats("POST /users/[name]/follow", 5),
    ]
    assert shared.completed_tasks(by_type) == 103


def test_medians_come_with_their_spread():
    assert figures.median_and_spread([3, 1, 2]) == {"median": 2, "min": 1, "max": 3}
    assert figures.median_and_spread([4, 1, 2, 3]) == {"median": 2.5, "min": 1, "max": 4}


def window(rps, met=True, login_p95=900, tasks=None):
    return {
        "rps": rps,
        "met": met,
        "failures": 0 if met else 3,
        "tasks_per_s": tasks if tasks is not None else rps * 0.95,
        "server_cpu_ms_per_request": 3.0,
        "by_request": {"POST /": {"p95_ms": login_p95}, "GET /tweets/": {"p95_ms": 40}},
    }


def test_a_cold_start_meets_the_bar_only_if_every_window_did():
    summary = figures.cold_summary([window(300), window(310, met=False, login_p95=2500), window(305)])
    assert not summary["met"] and summary["windows_met"] == 2
    assert summary["rps"] == {"median": 305, "min": 300, "max": 310}
    assert summary["p95_ms"]["POST /"]["median"] == 900


def test_the_report_shows_each_cold_start_beside_its_herd():
    cold = {
        "users": 300,
        "cold": figures.cold_summary([window(300), window(310), window(305)]),
        "herd": {"users": 600},
        "herd_figures": {"goodput_pct_of_capacity": 93.5, "recovered_after_s": None},
    }
    report = {"plan": {"cold_rate": 5.0}, "stages": [{"stage": 6, "name": "vertical", "cold_start": cold}]}
    row = cold_report.cold_start_table(report)[-1]
    assert row.startswith("| 6 vertical | 300 | 3/3 | 305 (300-310) | 900 |")
    assert row.endswith("| 600 | 93.5% | not within the limit |")
    assert cold_report.cold_start_table({"plan": {}, "stages": [{"stage": 6}]}) == []


def test_the_report_shows_the_herds_medians_then_each_ones_way_back():
    each = [(97.3, 30.0), (88.1, None), (102.7, 20.0)]
    herds = [
        {"tasks_per_s": pct, "goodput_pct_of_capacity": pct, "failures": 0, "recovered_after_s": s} for pct, s in each
    ]
    cold = {
        "users": 300,
        "cold": figures.cold_summary([window(300), window(310), window(305)]),
        "herd": {"users": 600},
        "herd_figures": figures.herds_summary(herds),
    }
    report = {"plan": {"herds": 3}, "stages": [{"stage": 6, "name": "vertical", "cold_start": cold}]}
    table = cold_report.cold_start_table(report)
    assert table[-1].endswith("| 600 | 97.3% (88.1-102.7) | 30 s (30, never, 20) |")
    assert "3 herds, each after the last one's way back and a window at the users" in table[0]


def test_the_report_shows_the_default_stages_cold_start_at_its_targets_load_under_its_capacitys():
    def cold(users):
        summary = figures.cold_summary([window(users), window(users)])
        return {"users": users, "cold": summary, "herd": {"users": 2 * users}, "herd_figures": {}}

    stage = {"stage": 6, "name": "vertical", "cold_start": cold(550), "cold_start_at_target": cold(443)}
    table = cold_report.cold_start_table({"plan": {"target_share": 0.55}, "stages": [stage]})
    assert table[-2].startswith("| 6 vertical | 550 | 2/2 |")
    assert table[-1].startswith("| 6 vertical, at 55% of its bcrypt bound | 443 | 2/2 |")
    assert "as many users as 55% of its bcrypt bound in QPS" in table[0]
