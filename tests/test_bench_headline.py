"""A stage's capacity, defined once, on made-up windows: the median of the windows at its step with
their spread, the overload step read against it in completed tasks and users served, and every
table, the chart and the stage READMEs showing that same figure."""

from __future__ import annotations

import copy

from test_bench import a_report, a_stage, a_step

from tools.bench import deployment, headline, publishing, runs, tables
from tools.protocol import Bar


def window(rps, failures=0, timeline_p95=250, login_p95=600) -> dict:
    """A 30 s window's figures as the load shape records them."""
    return {
        "window_s": 30.0,
        "requests": int(rps * 30),
        "failures": failures,
        "p95_ms": timeline_p95,
        "max_ms": 900,
        "rps": rps,
        "tasks_per_s": round(rps * 0.96, 1),
        "server_cpu_ms_per_request": 10.0,
        "met": not failures,
        "by_request": {
            "GET /tweets/": {"requests": int(rps * 28), "failures": failures, "p95_ms": timeline_p95, "max_ms": 900},
            "POST /": {"requests": 16, "failures": 0, "p95_ms": login_p95, "max_ms": 700},
        },
    }


def step(users, rps, *again, met=True) -> dict:
    return {"users": users, **window(rps), "met_bar": met, "repeats": [window(r) for r in again]}


def test_a_step_measured_three_times_gives_the_median_with_its_spread_and_count():
    found = headline.step_headline(step(200, 160.0, 150.0, 175.0), Bar())
    assert found["windows"] == 3 and found["met"]
    assert found["rps"] == {"median": 160.0, "min": 150.0, "max": 175.0}
    assert found["by_request"]["GET /tweets/"]["requests"] == int(160 * 28)


def test_the_median_of_the_windows_is_judged_request_type_by_request_type():
    # One slow window of three: the median of the login p95s is under the bar, so the step holds.
    slow_once = step(200, 160.0)
    slow_once["repeats"] = [window(160.0, login_p95=2500), window(160.0)]
    assert headline.step_headline(slow_once, Bar())["met"]
    # Two slow windows of three: the median misses, naming the type.
    slow_twice = step(200, 160.0)
    slow_twice["repeats"] = [window(160.0, login_p95=2500), window(160.0, login_p95=2600)]
    found = headline.step_headline(slow_twice, Bar())
    assert not found["met"] and found["misses"] == ["p95 too slow for POST / (2500 ms)"]


def test_capacity_is_the_highest_step_whose_median_meets_the_bar_before_the_first_that_missed():
    steps = [step(100, 80.0), step(200, 160.0, 150.0, 170.0), step(300, 200.0, met=False), step(400, 250.0)]
    best, capacity = headline.capacity_of(steps, Bar())
    assert best is steps[1] and capacity["users"] == 200 and capacity["rps"]["median"] == 160.0
    failing = step(200, 160.0)
    failing["repeats"] = [window(160.0, failures=2), window(160.0, failures=1)]
    best, capacity = headline.capacity_of([steps[0], failing], Bar())
    assert best is steps[0] and capacity["windows"] == 1
    assert headline.capacity_of([step(100, 80.0, met=False)], Bar()) == (None, None)


def test_capacity_is_also_a_share_of_the_runs_own_bcrypt_bound_with_the_stages_library():
    bound = {"hashes_per_s": 8.0, "libraries": {"libxcrypt": {"hashes_per_s": 12.0}}}
    assert headline.share_of_bound(329.3, bound) == round(329.3 / (8.0 * 247 / 3), 3)
    assert headline.share_of_bound(329.3, bound, "libxcrypt") == round(329.3 / (12.0 * 247 / 3), 3)
    assert headline.share_of_bound(329.3, None) is None


def test_overload_counts_completed_tasks_users_served_and_refusals_by_type():
    capacity = {"tasks_per_s": {"median": 150.0, "min": 140.0, "max": 155.0}}
    past = {
        "tasks_per_s": 75.0,
        "users_running": 400,
        "users_served": 180,
        "by_request": {"POST /": {"requests": 200, "failures": 172}, "GET /tweets/": {"requests": 2000}},
        "errors": {
            "POST /: expected 303, got 503": 160,
            "POST /: expected 303, got 0": 12,  # no answer: failed, but not refused
            "POST /register/: expected 303, got 503": 3,  # no request of the type counted: left out
        },
    }
    felt = headline.overload_as_felt(past, capacity)
    assert felt["goodput_tasks_per_s"] == 75.0 and felt["goodput_pct_of_capacity"] == 50.0
    assert felt["capacity_tasks_per_s"] == 150.0 and felt["users_served_share"] == 0.45
    assert felt["refused_by_type"] == {"POST /": {"refused": 160, "share": 0.8}}


def a_measured_stage() -> dict:
    """Stage 6 whose capacity step was measured three times, and whose overload step refused logins."""
    result = a_stage()
    result["steps"] = [step(100, 80.0), step(200, 160.0, 150.0, 175.0), step(300, 200.0, met=False)]
    result["overload"] = {
        **a_step(400, rps=150.0),
        "spawn_rate": 1.4,
        "window_s": 30.0,
        "requests": 4500,
        "failures": 300,
        "tasks_per_s": 76.8,
        "users_running": 400,
        "users_served": 300,
        "errors": {"POST /: expected 303, got 503": 300},
        "goodput_rps": 140.0,
        "failure_share": 0.0667,
        "capacity_rps": 175.0,  # a second definition of capacity, from runs that recorded one: dropped
    }
    logins = {"POST /": {"requests": 400, "failures": 300}}
    result["overload"]["by_request"] = {**result["overload"]["by_request"], **logins}
    return result


def test_every_table_the_readmes_and_the_overload_share_read_the_one_capacity():
    report = runs.normalize(a_report(a_measured_stage()))
    (result,) = report["stages"]
    assert result["best"] is result["steps"][1] and result["capacity"]["rps"]["median"] == 160.0
    assert "capacity_rps" not in result["overload"]
    # 76.8 tasks a second against the capacity's median 153.6 (160 x 0.96).
    assert result["overload"]["goodput_pct_of_capacity"] == 50.0
    text = tables.markdown(report)
    assert "| 200 | **160.0** (150.0-175.0, 3 windows) | 24% |" in text
    assert "| 400 (1.4) | 76.8 | 50.0% of 153.6 | 75% | `POST /` 75% |" in text
    assert "| 6 vertical | 200 (again) | — |" in text, "the repeats are among the steps, each its own row"
    readme = publishing.stage_figures(report, result, "link")
    assert readme.startswith("**160.0** (150.0-175.0, 3 windows) QPS at 200 locust users")
    assert "76.8 tasks/s got through (50.0% of the capacity's), 75% of its users got one through" in readme


def test_every_figure_read_from_one_window_comes_from_the_window_of_median_qps():
    measured = a_measured_stage()
    measured["steps"][1] = step(200, 175.0, 150.0, 160.0)  # the search's own window was the fastest
    first = measured["steps"][1]
    slower, median = first["repeats"]
    for w, cpu, hashes, memory, app in [
        (first, 5.0, 36, 450, 3.0),
        (slower, 7.0, 30, 500, 5.0),
        (median, 6.0, 24, 400, 4.0),
    ]:
        w.update(server_cpu_ms_per_request=cpu, hashes=hashes, peak_server_memory_mb=memory)
        w["tier_cpu_ms_per_request"] = {"front": 0.2, "app": app}
    report = runs.normalize(a_report(measured))
    (result,) = report["stages"]
    assert headline.typical_window(result["best"]) is median
    readme = publishing.stage_figures(report, result, "link")
    # 24 hashes in 4800 requests at the probe's 250 ms: 1.25 ms of bcrypt in that window's 6.0.
    assert "| 6.00 | 1.25 | 4.75 |" in readme and "peak server memory 400 MiB" in readme
    assert tables.projection_cells(result, report["bcrypt"])[2] == "6.0 (1.25 hashing)"
    assert "app 4.00" in "\n".join(deployment.tier_table(report))


def test_every_step_states_its_spawn_rate():
    measured = a_measured_stage()
    for s in measured["steps"]:
        s["spawn_rate"] = 1.4
    text = tables.markdown(runs.normalize(a_report(measured)))
    assert "| stage | users | spawn rate /s | ramp s |" in text
    assert "| 6 vertical | 100 | 1.4 | — |" in text and "| 6 vertical | 200 | 1.4 | — |" in text


def test_an_earlier_runs_windows_get_their_completed_tasks_counted_from_their_requests():
    old = a_measured_stage()
    del old["overload"]["tasks_per_s"]
    old["overload"]["by_request"] = {"GET /tweets/": {"requests": 3000, "failures": 0}, "GET /": {"requests": 1500}}
    (result,) = runs.normalize(a_report(old))["stages"]
    assert result["overload"]["goodput_tasks_per_s"] == 100.0, "the login forms fetched again are no task"


def test_a_report_is_the_same_whether_normalized_once_or_twice():
    report = runs.normalize(a_report(a_measured_stage()))
    again = runs.normalize(copy.deepcopy(report))
    assert tables.markdown(again) == tables.markdown(report)


def test_a_run_whose_capacities_rest_on_fewer_than_three_windows_never_publishes(tmp_path):
    from test_bench import a_checkout, every_stage, files_of

    from tools.bench import report

    root = a_checkout(tmp_path)
    before = files_of(root)
    folder = root / "results" / "run"
    folder.mkdir()
    hurried = a_report(*every_stage())
    hurried["plan"] = {**hurried["plan"], "capacity_windows": 2}
    assert not report.write_reports(hurried, folder, root=root)
    assert files_of(root) == before
    assert report.publishes({**hurried, "plan": {**hurried["plan"], "capacity_windows": 3}}, folder, root=root)


def test_the_windows_at_capacity_are_a_setting_a_quick_run_keeps_small():
    from dataclasses import asdict

    from tools import stages
    from tools.bench import plan

    assert plan.make_plan([6], False, {}).capacity_windows == 3
    assert plan.make_plan([6], True, {}).capacity_windows == 1
    more = plan.make_plan([6], False, {"TWEEPY_BENCH_CAPACITY_WINDOWS": "5"})
    every = [s.number for s in stages.all_stages()]
    assert plan.command_of(asdict(more), every) == 'TWEEPY_BENCH_CAPACITY_WINDOWS=5 make bench STAGES="6"'
    assert plan.shape_environment(more, "out", [], 1.0)["TWEEPY_BENCH_CAPACITY_WINDOWS"] == "5"
