"""The bench: its arithmetic and reports on made-up figures (fast), and `make bench QUICK=1` end to end
(integration), which proves the pipeline runs and that what it measured is plausible; it asserts
no speed: that is what `make bench` is for."""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import pytest

from tools import stages
from tools.bench import charts, deployment, figures, machine, measure, plan, publishing, report, runs, serving, tables
from tools.bench.procfs import run_and_wait_seconds
from tools.protocol import (
    AGGREGATED,
    FIRST_LOGIN_KEY,
    HASHES_PER_CYCLE,
    REQUEST_TYPES,
    REQUESTS_PER_CYCLE,
    TASKS_PER_CYCLE,
    Bar,
    RequestStats,
    hashes_done,
)

# --- made-up runs --------------------------------------------------------------------------------


def a_step(users=100, rps=80.0, p95=300, by_request=None, **extra) -> dict:
    by_request = by_request or {
        "GET /tweets/": {"requests": 2000, "failures": 0, "p95_ms": 250, "max_ms": 900},
        "POST /": {"requests": 16, "failures": 0, "p95_ms": 600, "max_ms": 700},
        "POST /register/": {"requests": 8, "failures": 0, "p95_ms": 650, "max_ms": 700},
        "POST /tweets/": {"requests": 200, "failures": 0, "p95_ms": 280, "max_ms": 500},
    }
    return {
        "users": users,
        "ramp_s": 20.0,
        "first_login_p95_ms": 900,
        "window_s": 30.0,
        "requests": int(rps * 30),
        "rps": rps,
        "p95_ms": p95,
        "failures": 0,
        "by_request": by_request,
        "slowest": "POST /register/",
        "slowest_p95_ms": 650,
        "hashes": 24,
        "server_cpu_ms_per_request": 10.0,
        "peak_server_memory_mb": 300,
        "generator_cpu_share": 0.05,
        "met_bar": True,
        **extra,
    }


def a_stage(number=6, name="vertical", run=None, **extra) -> dict:
    best = a_step(200, rps=160.0)
    result = {
        "stage": number,
        "name": name,
        "settings": {"TWEEPY_SERVER": "uwsgi", "TWEEPY_PROCESSES": "auto"},
        "server": "uwsgi",
        "processes": 2,
        "processes_setting": "auto",
        "ceiling": {"rps": 3000.0, "lower_bound": True, "why": "the generator was busy", "failures": 0},
        "steps": [a_step(100), best, a_step(300, met_bar=False, reasons=["window: 2 failures (POST / 2)"])],
        "overload": {
            **a_step(400, rps=150.0),
            "goodput_rps": 140.0,
            "goodput_pct_of_capacity": 87.5,
            "failure_share": 0.05,
            "capacity_rps": 160.0,
        },
        "best": best,
        "search": {"state": "complete", "ended": "missed at 300 users"},
        "run": run or A_RUN,
    }
    result.update(extra)
    return result


A_BOUND = {"cost": 12, "cores": 2, "hashes_per_s": 8.0, "cpu_ms_per_hash": 250.0, "protocol_qps_bound": 650.7}
A_RUN = {"date": "2026-11-22 10:00 UTC", "commit": "abc1234", "bcrypt": A_BOUND}


def a_report(*results) -> dict:
    return {
        "date": "2026-11-22 10:00 UTC",
        "commit": "abc1234",
        "machine": {"host": "vm", "cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5, "os": "Linux", "python": "3.11"},
        "generator": {"host": "vm", "processes": 1, "same_machine_as_servers": True},
        "plan": {"users": 10_000, "tweets": 1_000_000, "follows": 20, "window_s": 30, "locust_processes": 1},
        "bar": {"max_p95_ms": 2000.0, "max_failures": 0, "min_requests": 5},
        "bcrypt": A_BOUND,
        "stages": list(results) or [a_stage()],
    }


# --- the protocol's arithmetic ------------------------------------------------------------------


def test_a_cycle_of_238_tasks_sends_247_requests_of_which_3_hash():
    assert (TASKS_PER_CYCLE, REQUESTS_PER_CYCLE, HASHES_PER_CYCLE) == (238, 247, 3)


def test_the_bcrypt_bound_counts_3_hashes_per_247_requests_not_238():
    assert figures.protocol_qps_bound(9.0) == pytest.approx(9.0 * 247 / 3)


def test_hashes_are_counted_from_successful_logins_registrations_and_first_logins_only():
    by_type = [
        RequestStats("POST /", 10, failures=2),
        RequestStats("POST /register/", 4),
        RequestStats(FIRST_LOGIN_KEY, 3, failures=1),
        RequestStats("GET /", 14),
        RequestStats("GET /tweets/", 1000),
    ]
    assert hashes_done(by_type) == 8 + 4 + 2


def test_a_windows_figures_count_its_hashes_and_its_goodput():
    by_type = [RequestStats("POST /", 6, 0, 400), RequestStats("GET /tweets/", 480, 2, 30)]
    total = RequestStats(AGGREGATED, 486, 2, 40, 900)
    window = figures.window_figures(by_type, total, 10.0, 2.43, 0.5, 2, Bar())
    assert window["hashes"] == 6 and window["hashes_per_s"] == 0.6
    assert window["rps"] == 48.6 and window["goodput_rps"] == 48.4
    assert window["server_cpu_ms_per_request"] == 5.0
    assert window["generator_cpu_ms_per_request"] == round(1000 * 0.5 / window["requests"], 3)
    assert not window["met"] and "2 failures (GET /tweets/ 2)" in window["misses"][0]


# --- steps: the ramp counts ----------------------------------------------------------------------


def judged(by_type, total) -> dict:
    return figures.judged(by_type, total, 10.0, Bar())


def test_a_failure_during_the_ramp_misses_the_step_even_when_its_window_is_clean():
    ramp = judged([RequestStats(FIRST_LOGIN_KEY, 50, 1, 900)], RequestStats(AGGREGATED, 50, 1, 900))
    window = judged([RequestStats("GET /tweets/", 500, 0, 30)], RequestStats(AGGREGATED, 500, 0, 30))
    met, reasons = figures.step_verdict(ramp, window)
    assert not met
    assert reasons == [f"ramp: 1 failures ({FIRST_LOGIN_KEY} 1)"]


def test_slow_first_logins_during_the_ramp_miss_the_step():
    ramp = judged(
        [RequestStats(FIRST_LOGIN_KEY, 100, 0, 16_000), RequestStats("GET /", 100, 0, 20)],
        RequestStats(AGGREGATED, 200, 0, 1500),
    )
    window = judged([RequestStats("GET /tweets/", 500, 0, 30)], RequestStats(AGGREGATED, 500, 0, 30))
    met, reasons = figures.step_verdict(ramp, window)
    assert not met
    assert reasons == [f"ramp: p95 too slow for {FIRST_LOGIN_KEY} (16000 ms)"]


def test_a_ramp_that_cannot_finish_in_its_limit_misses_with_its_reason():
    ramp = judged([RequestStats(FIRST_LOGIN_KEY, 40, 0, 900)], RequestStats(AGGREGATED, 40, 0, 900))
    met, reasons = figures.step_verdict(ramp, None, "ramp not finished in 600s: 100 of 100 users running")
    assert not met
    assert reasons == ["ramp not finished in 600s: 100 of 100 users running", "no window was measured"]


def test_a_step_whose_ramp_and_window_both_meet_the_bar_meets_it():
    clean = judged([RequestStats("GET /tweets/", 500, 0, 30)], RequestStats(AGGREGATED, 500, 0, 30))
    assert figures.step_verdict(clean, clean) == (True, [])


# --- past capacity ---------------------------------------------------------------------------------


def test_the_overload_step_runs_twice_the_best_steps_users_within_its_bound():
    assert figures.overload_users(400, 2.0, 2400) == 800
    assert figures.overload_users(1200, 2.0, 2000) == 2000
    assert figures.overload_users(2000, 2.0, 2000) == 2001, "always past the best step"
    assert figures.overload_users(None, 2.0, 2400) is None, "no capacity, nothing to overload"
    assert figures.overload_users(400, 0, 2400) is None, "switched off"


def test_the_overload_steps_successful_requests_and_failed_share_are_counted():
    window = {"requests": 6000, "failures": 600, "window_s": 30.0, "max_ms": 60_000}
    found = figures.overload_figures(window)
    assert found == {"goodput_rps": 180.0, "failure_share": 0.1, "max_ms": 60_000}


# --- the capacity model -------------------------------------------------------------------------------


def test_the_projection_takes_the_counted_hashes_out_and_puts_the_protocols_share_back():
    # 10 ms a request measured, 30 hashes of 200 ms in 1000 requests: 6 ms of it was hashing.
    p = figures.projection(10.0, hashes=30, requests=1000, ms_per_hash=200.0, cores=4, parallel=None)
    assert p["app_cpu_ms_per_request"] == 4.0
    assert p["cpu_ms_per_request"] == pytest.approx(4.0 + 3 / 247 * 200, abs=0.01)
    assert p["qps"] == round(4 * 1000 / (4.0 + 3 / 247 * 200))


def test_the_projection_gives_no_stage_more_cores_than_it_can_run_at_once():
    on_8 = figures.projection(10.0, 0, 1000, 200.0, cores=8, parallel=4)
    on_4 = figures.projection(10.0, 0, 1000, 200.0, cores=4, parallel=4)
    assert on_8["usable_cores"] == 4 and on_8["qps"] == on_4["qps"]
    assert tables.parallel_processes({"server": "dev"}) == 1
    assert tables.parallel_processes({"server": "uwsgi", "processes_setting": "4"}) == 4
    assert tables.parallel_processes({"settings": {"TWEEPY_SERVER": "uwsgi", "TWEEPY_PROCESSES": "auto"}}) is None
    gevent = {"TWEEPY_SERVER": "uwsgi", "TWEEPY_GEVENT": "100", "TWEEPY_BCRYPT_IN_THREADPOOL": "true"}
    hashing_beside = {**gevent, "TWEEPY_HASHING_SLOTS": "2"}
    assert tables.parallel_processes({"settings": hashing_beside, "processes_setting": "4"}) == 12


def test_a_stage_is_measured_against_the_bcrypt_library_it_hashes_with():
    bound = {
        **A_BOUND,
        "cpu_ms_per_hash": 200.0,
        "libraries": {"libxcrypt": {"hashes_per_s": 12.0, "cpu_ms_per_hash": 160.0}},
    }
    assert figures.cpu_ms_per_hash(bound) == 200.0
    assert figures.cpu_ms_per_hash(bound, "libxcrypt") == 160.0
    assert figures.cpu_ms_per_hash(A_BOUND, "libxcrypt") == figures.cpu_ms_per_hash(A_BOUND)  # not probed: pyca's
    run = {**A_RUN, "bcrypt": bound}
    pyca, libxcrypt = a_stage(5, "concurrency", run=run), a_stage(run=run)
    libxcrypt["settings"] = {**libxcrypt["settings"], "TWEEPY_BCRYPT_LIBRARY": "libxcrypt"}
    assert figures.hash_library(pyca) == "pyca" and figures.hash_library(libxcrypt) == "libxcrypt"
    # The same window and server CPU, less of it bcrypt: more of it the rest, and a higher projection.
    assert tables.projection_cells(libxcrypt, bound)[2] != tables.projection_cells(pyca, bound)[2]
    text = tables.markdown(a_report(pyca, libxcrypt))
    assert "libxcrypt 12.0 hashes/s (160.0 ms)" in text


def test_hashing_on_threads_of_its_own_shows_their_measured_cpu_beside_the_probes_estimate():
    threaded = a_stage()
    threaded["best"] = {**threaded["best"], "hashing_threads_cpu_ms_per_request": 2.1}
    # 24 hashes in 4800 requests at the probe's 250 ms: 1.25 ms a request, by estimate.
    assert tables.projection_cells(threaded, A_BOUND)[2] == "10.0 (1.25 hashing; 2.10 in its hashing threads)"
    assert tables.projection_cells(a_stage(), A_BOUND)[2] == "10.0 (1.25 hashing)"
    # The stage README's table: of it bcrypt and the rest, each with the threads' own measure beside it.
    assert "| 10.00 | 1.25 (2.10 measured) | 8.75 (7.90 measured) |" in publishing.stage_figures(
        a_report(threaded), threaded, "link"
    )
    assert "| 10.00 | 1.25 | 8.75 |" in publishing.stage_figures(a_report(), a_stage(), "link")


def test_a_stage_readme_reads_its_step_as_a_multiple_of_the_step_before_ours_and_the_talks():
    faster = a_step(200, rps=200.0)
    missed = a_step(300, met_bar=False, reasons=["window: 2 failures (POST / 2)"])
    step = a_stage(5, "concurrency", steps=[a_step(100), faster, missed], best=faster)
    readme = publishing.stage_figures(a_report(a_stage(4, "cache"), step), step, "link")
    # 200 against 160 QPS at the bar here; the talk's 550 against its 350.
    assert "| 5 concurrency (this step) | 2026-11-22 10:00 UTC, abc1234 | **200.0** (1 window) | ×1.25 |" in readme
    assert "| 550 QPS, 4 CPUs | ×1.57 |" in readme
    assert "| 4 cache | 2026-11-22 10:00 UTC, abc1234 | **160.0** (1 window) | — |" in readme, (
        "the step before is the unit"
    )


def test_the_probe_measures_every_bcrypt_library_this_machine_has():
    probe = machine.bcrypt_bound(4, 0.2)
    assert set(probe["libraries"]) == {"pyca", "libxcrypt"}
    assert probe["hashes_per_s"] == probe["libraries"]["pyca"]["hashes_per_s"]


def test_cpu_per_hash_is_the_probes_own_measure_when_it_recorded_one():
    assert figures.cpu_ms_per_hash({"cores": 2, "hashes_per_s": 8.0, "cpu_ms_per_hash": 241.5}) == 241.5
    assert figures.cpu_ms_per_hash({"cores": 2, "hashes_per_s": 8.0}) == 250.0  # runs from before it did


def test_the_bcrypt_probe_counts_the_cpu_of_its_hashes_not_the_time_to_start_its_pool():
    probe = machine.bcrypt_bound(4, 0.2)
    single = machine._hash_for(("pyca", 4, 0.2))
    assert probe["cpu_ms_per_hash"] == pytest.approx(1000 * single[2] / single[0], rel=0.5)


def test_a_bcrypt_probe_whose_hashing_fails_says_so_at_once():
    with pytest.raises(RuntimeError, match="no-such-library"):
        machine._probe("no-such-library", 4, 0.2, cores=2)


def test_a_bcrypt_probe_that_outlives_its_deadline_fails_and_stops_its_processes():
    before = set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match="did not report within 1s"):
        machine._probe("pyca", 18, 0.2, cores=2, deadline=1)  # one hash at cost 18 takes tens of seconds
    assert set(multiprocessing.active_children()) == before


def test_projections_are_labelled_and_shown_next_to_the_talks_figures():
    text = tables.markdown(a_report(a_stage(5, "concurrency", processes_setting="4")))
    assert "projection: 4 cores | projection: 8 cores | the talk (measured) |" in text
    assert "550 QPS, 4 CPUs" in text
    assert "Projections are not measurements" in text
    assert "1K QPS, vCPUs not stated" in tables.markdown(a_report())


# --- honest reports -------------------------------------------------------------------------------------


def test_every_row_names_its_run_and_commit_even_in_a_stage_readme():
    earlier = {"date": "2026-11-21 08:00 UTC", "commit": "0ld0ld0", "bcrypt": {**A_BOUND, "hashes_per_s": 9.0}}
    text = tables.markdown(a_report(a_stage(5, "concurrency", run=earlier), a_stage()))
    assert "| 5 concurrency | 2026-11-21 08:00 UTC, 0ld0ld0 |" in text
    assert "| 6 vertical | 2026-11-22 10:00 UTC, abc1234 |" in text
    readme = publishing.stage_figures(a_report(), a_stage(run=earlier), "link")
    assert "run of 2026-11-21 08:00 UTC, commit 0ld0ld0" in readme


def test_a_profile_names_the_commit_its_servers_ran_not_the_tree_it_ended_with(monkeypatch):
    from tools import profile

    monkeypatch.setattr(machine, "git_commit", lambda: "abc1234+changes")  # edited while it ran
    result = {
        "stage": 6, "commit": "abc1234", "users": 300, "seconds": 333.0, "bcrypt_cost": 12, "rps": 180.0,
        "data": {"users": 10_000, "tweets": 1_000_000}, "failures": 0, "requests": 59_000,
        "window": {"requests": 7000, "seconds": 28.0, "hashes": 90}, "server_cpu_ms_per_request": 5.0,
        "bcrypt_ms_per_request": 3.0, "cpu_ms_per_hash": 230.0, "non_bcrypt_cpu_ms_per_request": 2.0,
        "p95_ms": {"all": "120"},
    }  # fmt: skip
    text = profile.summary(result, stages.get_stage(6), "top")
    assert "commit abc1234." in text and "+changes" not in text


class Served(Exception):
    """Raised where a tool's stage would start serving."""


@pytest.mark.parametrize(("tool", "arguments"), [("profile", (300, 60.0)), ("soak", (300, 5.0, 10.0))])
def test_profile_and_soak_serve_the_stage_as_the_bench_does(monkeypatch, tmp_path, tool, arguments):
    # Stage 7 on the SQLite file of the seed, under the default key prefix, would be profiled (or soaked)
    # on another database than its own, with whatever an earlier run left in Redis.
    served = []

    @contextlib.contextmanager
    def as_the_bench(plan, stage, master):
        served.append((stage.number, master))
        raise Served
        yield

    monkeypatch.setattr(serving, "served", as_the_bench)
    monkeypatch.setattr(serving, "seeded_master", lambda plan: tmp_path / "seed.sqlite3")
    monkeypatch.setattr(machine, "bcrypt_bound", lambda cost, seconds: {"hashes_per_s": 8.0})
    run = getattr(importlib.import_module(f"tools.{tool}"), tool)
    with pytest.raises(Served):
        run(7, *arguments, tmp_path / "out")
    assert served == [(7, tmp_path / "seed.sqlite3")]


def test_a_profile_of_a_part_serves_that_part_and_shows_the_cpu_of_each_tier(monkeypatch, tmp_path):
    from tools import profile

    served = []

    @contextlib.contextmanager
    def as_the_bench(plan, stage, master):
        served.append((stage.number, stage.part, stage.app_setting("CACHE")))
        raise Served
        yield

    monkeypatch.setattr(serving, "served", as_the_bench)
    monkeypatch.setattr(serving, "seeded_master", lambda plan: tmp_path / "seed.sqlite3")
    monkeypatch.setattr(machine, "bcrypt_bound", lambda cost, seconds: {"hashes_per_s": 8.0})
    with pytest.raises(Served):
        profile.profile(7, 300, 60.0, tmp_path / "out", part="stores")
    assert served == [(7, "stores", "redis")]

    result = {
        "stage": 7, "part": "stores", "commit": "abc1234", "users": 700, "seconds": 150.0, "bcrypt_cost": 12,
        "rps": 360.0, "data": {"users": 10_000, "tweets": 1_000_000}, "failures": 0, "requests": 50_000,
        "window": {"requests": 10_000, "seconds": 28.0, "hashes": 100}, "server_cpu_ms_per_request": 4.3,
        "bcrypt_ms_per_request": 2.4, "cpu_ms_per_hash": 240.0, "non_bcrypt_cpu_ms_per_request": 1.9,
        "tier_cpu_ms_per_request": {"front": 0.16, "app": 3.95, "postgresql": 0.15, "redis": 0.05},
        "app_threads_outside_hashing_s": {"on_a_core": 11.1, "waiting_for_one": 10.5},
        "p95_ms": {"all": "900"},
    }  # fmt: skip
    text = profile.summary(result, stages.get_stage(7, "stores"), "top")
    assert text.startswith("# Profile of stage 7 scale-out, stores")
    assert "By tier, ms a request: front 0.16, app 3.95, postgresql 0.15, redis 0.05." in text
    assert "threads outside hashing were on a core 11.1 s and waited for one 10.5 s" in text
    # One machine's tiers, nginx and the app, need no line of their own.
    result["tier_cpu_ms_per_request"] = {"front": 0.15, "app": 3.4}
    assert "By tier" not in profile.summary(result, stages.get_stage(6), "top")


def test_the_time_threads_ran_and_waited_for_a_core_is_read_for_all_but_the_named_threads():
    me = [os.getpid()]
    before = run_and_wait_seconds(me, but_not="no such thread")
    sum(range(3_000_000))
    after = run_and_wait_seconds(me, but_not="no such thread")
    assert after[0] > before[0] and after[1] >= before[1]
    this_thread = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().rstrip("\n")
    without_it = run_and_wait_seconds(me, but_not=this_thread)
    assert without_it[0] < after[0]


def test_a_profile_samples_every_app_server_and_not_nginx_and_draws_the_first_while_it_works(tmp_path):
    from tools import profile

    def busy(name: str) -> subprocess.Popen:
        script = tmp_path / "servers" / f"{name}.py"
        script.parent.mkdir(exist_ok=True)
        script.write_text(f"def {name}():\n    while True:\n        sum(range(1000))\n\n\n{name}()\n")
        return subprocess.Popen([sys.executable, str(script)])

    nodes = [("nginx", busy("front_door")), ("uwsgi-node1", busy("first_node")), ("uwsgi-node2", busy("second_node"))]
    try:
        pids = profile.app_servers(nodes)
        assert pids == [nodes[1][1].pid, nodes[2][1].pid]
        profile.record_stacks(pids, 2, tmp_path / "profile.raw", flame=tmp_path / "flame.svg")
    finally:
        for _, process in nodes:
            process.kill()
            process.wait()
    with open(tmp_path / "profile.raw") as raw:
        inclusive, _, counts = profile.busy_functions(raw)
    sampled = {name.split(" ")[0] for name in inclusive}
    assert {"first_node", "second_node"} <= sampled and "front_door" not in sampled
    assert counts["busy"] > 0 and sorted(tmp_path.glob("profile*")) == [tmp_path / "profile.raw"]
    # The picture is of the same busy seconds, not of a server sampled once the load has gone.
    picture = (tmp_path / "flame.svg").read_text()
    assert "first_node" in picture and "second_node" not in picture and "front_door" not in picture


def test_a_hashing_thread_waiting_for_its_bell_is_idle_and_its_work_is_not():
    from tools import profile

    thread = 'process 7:"uwsgi";thread (0x1);_bootstrap (threading.py:1002)'
    loop = "HashingThreads._serve (tweepy/hashing_threads.py"
    stacks = [
        f"{thread};{loop}:66) 36",  # waiting for its bell
        f"{thread};{loop}:70);HashingThreads._hash (tweepy/hashing_threads.py:88);_crypt (tweepy/passwords.py:60) 50",
        f"{thread};{loop}:69);HashingThreads._next (tweepy/hashing_threads.py:78) 2",
    ]
    _, own, counts = profile.busy_functions(stacks)
    assert counts == {"busy": 2, "hashing": 50, "idle": 36}
    assert list(own) == ["HashingThreads._next (tweepy/hashing_threads.py:78)"]


def test_a_profile_of_a_stage_hashing_on_its_own_threads_shows_their_cpu_measured():
    from tools import profile

    result = {
        "stage": 6, "commit": "abc1234", "users": 300, "seconds": 333.0, "bcrypt_cost": 12, "rps": 180.0,
        "data": {"users": 10_000, "tweets": 1_000_000}, "failures": 0, "requests": 59_000,
        "window": {"requests": 7000, "seconds": 28.0, "hashes": 90}, "server_cpu_ms_per_request": 5.0,
        "bcrypt_ms_per_request": 3.0, "cpu_ms_per_hash": 230.0, "non_bcrypt_cpu_ms_per_request": 2.0,
        "hashing_threads_cpu_ms_per_request": 3.3, "outside_hashing_threads_cpu_ms_per_request": 1.7,
        "p95_ms": {"all": "120"},
    }  # fmt: skip
    text = profile.summary(result, stages.get_stage(6), "top")
    assert "the hashing threads (`tweepy-hash`) took 3.3 ms a request (110% of that estimate)" in text
    assert "everything else **1.7 ms**" in text
    result["hashing_threads_cpu_ms_per_request"] = result["outside_hashing_threads_cpu_ms_per_request"] = None
    assert "thread by thread" not in profile.summary(result, stages.get_stage(6), "top")


def test_figures_against_a_bcrypt_bound_are_grouped_by_the_run_whose_probe_they_used():
    earlier = {"date": "2026-11-21 08:00 UTC", "commit": "0ld0ld0", "bcrypt": {**A_BOUND, "hashes_per_s": 9.0}}
    text = tables.markdown(a_report(a_stage(5, "concurrency", run=earlier), a_stage()))
    this_run, earlier_run = text.index("Run of 2026-11-22 10:00 UTC"), text.index("Run of 2026-11-21 08:00 UTC")
    notes = text.index("QPS at the bar (the capacity")
    assert "bcrypt bound 8.0 hashes/s" in text[this_run:earlier_run]
    assert "bcrypt bound 9.0 hashes/s" in text[earlier_run:notes]
    assert "| 6 vertical |" in text[this_run:earlier_run] and "| 6 vertical |" not in text[earlier_run:notes]
    assert "| 5 concurrency |" in text[earlier_run:notes]


def test_the_reports_show_each_shown_request_types_p95_and_the_slowest():
    text = tables.markdown(a_report())
    assert "log in `POST /` | register `POST /register/` | timeline `GET /tweets/` | write `POST /tweets/`" in text
    assert "| 160.0 (1 window) | 24% | 300 | 600 | 650 | 250 | 280 | `POST /register/` 650 ms |" in text.replace(
        "**", ""
    )


def test_the_generator_column_shows_its_share_of_the_machine_and_its_cpu_a_request():
    step = a_step(200, rps=160.0, generator_cpu_cores=0.096)  # 0.6 ms of the generator's CPU for each of 160
    assert tables.generator_cell(step) == "5%, 0.60 ms/req"
    assert tables.generator_cell(a_step(200)) == "5%"  # runs that did not record its cores
    # Recorded by the window itself, unrounded by the cores' two decimals, it is shown as it is.
    assert tables.generator_cell({**step, "generator_cpu_ms_per_request": 0.613}) == "5%, 0.61 ms/req"
    assert tables.generator_cell({}) == "—"
    assert "| 5%, 0.60 ms/req |" in tables.markdown(a_report(a_stage(best=step)))


def test_a_search_cut_short_never_shows_its_last_passing_step_as_the_capacity():
    cut = a_stage(search={"state": "cut short", "ended": "", "note": "locust exited with code -9 in the window"})
    text = tables.markdown(a_report(cut))
    assert "≥ 160.0 (1 window; search cut short)" in text and "**160.0**" not in text
    assert "search cut short: locust exited with code -9 in the window" in text


def test_a_stage_that_crashed_says_so_in_its_row_and_its_readme():
    crashed = measure.crashed_stage(stages.get_stage(6), RuntimeError("uwsgi exited with 1 while starting:\nlog tail"))
    crashed["run"] = A_RUN
    text = tables.markdown(a_report(crashed))
    assert "| crashed: RuntimeError: uwsgi exited with 1 while starting: |" in text
    assert "crashed: RuntimeError" in publishing.stage_figures(a_report(), crashed, "link")


def test_a_crashed_locust_that_wrote_nothing_is_reported_as_crashed(tmp_path):
    outcome = measure.search_outcome(tmp_path / "missing.json", 2, True, "stage6-locust.log")
    assert outcome["search"]["state"] == "crashed"
    assert "exited with code 2" in outcome["search"]["note"]


def test_a_search_whose_shape_never_said_done_was_cut_short(tmp_path):
    out = tmp_path / "steps.json"
    progress = {"phase": "window", "step": 3, "target_users": 100}
    out.write_text(json.dumps({"state": "searching", "steps": [a_step(25), a_step(50)], "progress": progress}))
    outcome = measure.search_outcome(out, -9, True, "stage6-locust.log")
    assert outcome["search"]["state"] == "cut short"
    assert outcome["search"]["note"].startswith("locust exited with code -9 in the window of step 3 (100 users)")
    assert measure.search_outcome(out, 0, False, "log")["search"]["note"].startswith("a server exited")


def test_a_stage_that_misses_the_bar_at_its_first_step_is_reported_as_missed():
    missed = a_stage(0, "baseline", best=None, overload=None, steps=[a_step(25, met_bar=False, reasons=["window: x"])])
    assert "| 0 baseline | 2026-11-22 10:00 UTC, abc1234 | — | — (missed at 25 users) |" in tables.markdown(
        a_report(missed)
    )


def test_a_ceiling_the_generator_could_not_saturate_is_reported_as_a_lower_bound():
    assert measure.ceiling_verdict(2000, 0.95, 0.9, processes=1, cores=2)["lower_bound"]
    assert measure.ceiling_verdict(2000, 0.5, 1.4, processes=1, cores=2)["lower_bound"], "the machine was full"
    assert not measure.ceiling_verdict(2000, 0.5, 0.6, processes=1, cores=4)["lower_bound"]
    assert "≥ 3000 (lower bound), 0 failed" in tables.markdown(a_report())


def test_the_bar_in_the_report_is_the_one_the_run_used():
    looser = {**a_report(), "bar": {"max_p95_ms": 5000.0, "max_failures": 3, "min_requests": 10}}
    text = tables.markdown(looser)
    assert "Bar: p95 < 5000 ms for all requests and for every request type with at least 10 requests" in text
    assert "at most 3 failed request(s)" in text


def test_old_results_are_rejudged_with_the_per_type_bar():
    old = a_step(400, login_p95_ms=16_000, login_failures=0)
    del old["slowest"], old["hashes"]
    results = {k: v for k, v in a_stage().items() if k not in ("search", "overload", "ceiling")}
    results.update(steps=[a_step(200), old], best=old, ceiling_rps=3000.0)
    rejudged = runs.normalize({**a_report(), "bar": None, "stages": [results]})
    stage = rejudged["stages"][0]
    assert stage["best"]["users"] == 200
    assert stage["steps"][1]["reasons"] == [f"ramp: p95 too slow for {FIRST_LOGIN_KEY} (16000 ms)"]
    assert stage["steps"][1]["hashes"] == 24


def test_a_kept_stage_whose_runs_probe_is_lost_is_never_measured_against_this_runs(tmp_path):
    kept = a_stage(5, "concurrency", run={"date": "2026-11-21 08:00 UTC", "commit": "0ld0ld0"})
    text = tables.markdown(runs.normalize(a_report(kept, a_stage()), results=tmp_path))
    assert "Run of 2026-11-21 08:00 UTC, 0ld0ld0: its bcrypt probe is not recorded" in text


def test_rows_kept_from_a_run_on_another_machine_say_which_machine_it_was(tmp_path):
    other = {**a_report()["machine"], "os": "Linux-older-kernel"}
    kept = a_stage(5, "concurrency", run={"date": "2026-11-21 08:00 UTC", "commit": "0ld0ld0", "machine": other})
    text = tables.markdown(runs.normalize(a_report(kept, a_stage()), results=tmp_path))
    where = "the run of 2026-11-21 08:00 UTC, 0ld0ld0: AMD EPYC, 2 cores, Linux-older-kernel"
    assert f"Rows from another machine: {where}." in text
    readme = publishing.stage_figures(runs.normalize(a_report(kept, a_stage()), results=tmp_path), a_stage(), "link")
    assert f"Rows from another machine: {where}." in readme, "the stage before it, in the step's own table"
    same = a_stage(5, "concurrency", run={"date": "2026-11-21 08:00 UTC", "commit": "0ld0ld0"})
    assert "Rows from another machine" not in tables.markdown(
        runs.normalize(a_report(same, a_stage()), results=tmp_path)
    )


def test_a_readme_block_between_the_bench_markers_is_replaced_and_the_rest_kept(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Stage\n\nText.\n")
    publishing.replace_block(readme, "first run")
    publishing.replace_block(readme, "second run")
    text = readme.read_text()
    assert text.startswith("# Stage\n\nText.\n")
    assert "second run" in text and "first run" not in text
    assert text.count(publishing.README_START) == 1 and text.count(publishing.README_END) == 1


# --- publishing: only a run that measured every stage ------------------------------------------------


def a_checkout(tmp_path) -> Path:
    """The files a full run publishes to, as a fresh checkout has them, in a folder of their own."""
    root = tmp_path / "checkout"
    (root / "results").mkdir(parents=True)
    (root / "results" / "LATEST.md").write_text("# Latest benchmark: an earlier run\n")
    for readme in [stages.ROOT / "README.md", stages.STAGES / "README.md"] + [
        stage.folder / "README.md" for stage in stages.all_stages()
    ]:
        copy = root / readme.relative_to(stages.ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(readme.read_text())
    return root


def files_of(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.md")) if "results/run" not in str(p)}


def every_stage(run=None) -> list[dict]:
    """A row for every stage of the ladder and every part of a step, as a full run measures them."""
    return [
        a_stage(each.number, each.name + (f", {each.part}" if each.part else ""), run=run, part=each.part)
        for stage in stages.all_stages()
        for each in (*stage.parts(), stage)
    ]


def test_a_run_that_measured_every_stage_publishes_its_figures(tmp_path):
    root = a_checkout(tmp_path)
    before = files_of(root)
    folder = root / "results" / "run"
    folder.mkdir()
    assert report.write_reports(a_report(*every_stage()), folder, root=root)
    after = files_of(root)
    assert after["results/LATEST.md"].startswith("# Latest benchmark: [run](run/RESULTS.md)")
    changed = {name for name in before if after[name] != before[name]}
    readmes = {f"stages/{stage.folder.name}/README.md" for stage in stages.all_stages()}
    assert {"results/LATEST.md", "README.md", "stages/README.md", *readmes} <= changed


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param(lambda: [a_stage(2, "parallelize"), a_stage(3, "database")], id="some stages (--stages)"),
        pytest.param(lambda: every_stage()[:-1], id="every stage but the last"),
        pytest.param(
            lambda: [*every_stage()[:-1], a_stage(7, "scale-out", run={**A_RUN, "date": "2026-11-01 10:00 UTC"})],
            id="a stage kept from an earlier run (--keep-from)",
        ),
    ],
)
def test_a_partial_run_writes_its_own_folder_and_never_publishes(tmp_path, rows):
    root = a_checkout(tmp_path)
    before = files_of(root)
    folder = root / "results" / "run"
    folder.mkdir()
    assert not report.write_reports(a_report(*rows()), folder, root=root)
    assert (folder / "RESULTS.md").read_text().startswith("# tweepy benchmark")
    assert files_of(root) == before, "LATEST.md, the README and the stage READMEs are left as they were"


def test_publishing_a_partial_run_is_refused_whoever_calls_it(tmp_path):
    root = a_checkout(tmp_path)
    folder = root / "results" / "run"
    folder.mkdir()
    partial = runs.normalize(a_report(a_stage(2, "parallelize")))
    with pytest.raises(ValueError, match="partial run never publishes"):
        publishing.publish(partial, folder, root)
    assert (root / "results" / "LATEST.md").read_text() == "# Latest benchmark: an earlier run\n"


def test_a_run_of_some_stages_is_named_for_them():
    from datetime import datetime

    from tools.bench.__main__ import results_folder

    now = datetime(2026, 11, 26, 1, 30)
    some = plan.make_plan([2, 3], False, {})
    every = plan.make_plan([s.number for s in stages.all_stages()], False, {})
    assert results_folder(some, now).name.endswith("-stages-2-3")
    assert "stages" not in results_folder(every, now).name


# --- the plan ---------------------------------------------------------------------------------------------


def test_the_plan_reads_the_declared_settings_and_refuses_steps_going_down():
    p = plan.make_plan(
        [6], False, {"TWEEPY_BENCH_STEPS": "10 20", "TWEEPY_BENCH_WINDOW": "10", "LOCUST_PROCESSES": "2"}
    )
    assert (p.steps, p.window_s, p.locust_processes) == ((10, 20), 10.0, 2)
    with pytest.raises(ValueError, match="TWEEPY_BENCH_STEPS"):
        plan.make_plan([6], False, {"TWEEPY_BENCH_STEPS": "20 10"})


def test_the_default_stage_alone_is_started_again_at_its_targets_load_when_its_capacity_lies_past_it():
    # libxcrypt's 9.78 hashes a second make a bound of 805 QPS, 55% of it 443 users; pyca's 8.4 make 692.
    bound = {"hashes_per_s": 8.4, "libraries": {"pyca": {"hashes_per_s": 8.4}, "libxcrypt": {"hashes_per_s": 9.78}}}
    p = plan.make_plan([4, 6], False, {})
    default = stages.get_stage(stages.DEFAULT_STAGE)
    assert default.app_setting("BCRYPT_LIBRARY") == "libxcrypt"
    assert plan.cold_starts(p, default, 550, bound) == {"cold_start": 550, "cold_start_at_target": 443}
    assert plan.cold_starts(p, default, 400, bound) == {"cold_start": 400}, "its capacity is the harder test"
    assert plan.cold_starts(p, stages.get_stage(4), 600, bound) == {"cold_start": 600}
    assert plan.cold_starts(plan.make_plan([6], False, {"TWEEPY_BENCH_TARGET_SHARE": "0"}), default, 550, bound) == {
        "cold_start": 550
    }
    assert plan.cold_starts(plan.make_plan([6], False, {"TWEEPY_BENCH_COLD_WINDOWS": "0"}), default, 550, bound) == {}


def test_the_makefile_serves_the_default_stage_when_no_stage_is_checked_out():
    makefile = (stages.ROOT / "Makefile").read_text()
    assert f"STAGE  ?= $(shell cat stages/CURRENT 2>/dev/null || echo {stages.DEFAULT_STAGE})" in makefile


def test_a_quick_run_keeps_its_small_data_whatever_the_environment_says():
    p = plan.make_plan([6], True, {"TWEEPY_BENCH_USERS": "10000"})
    assert p.users == 200 and p.quick


def test_a_report_names_the_command_that_makes_it_again():
    every = [s.number for s in stages.all_stages()]
    default = plan.make_plan(every, False, {})
    assert plan.command_of(asdict(default), every) == "make bench"
    shorter = plan.make_plan([3, 4], False, {"TWEEPY_BENCH_WINDOW": "30", "TWEEPY_BENCH_STEPS": "25 50"})
    shorter.kept_from = "results/earlier"
    assert plan.command_of(asdict(shorter), every) == (
        'TWEEPY_BENCH_WINDOW=30 TWEEPY_BENCH_STEPS="25 50" make bench STAGES="3 4" KEEP_FROM=results/earlier'
    )
    assert plan.command_of(asdict(plan.make_plan([6], True, {})), every) == 'make bench STAGES="6" QUICK=1'
    variant = plan.make_plan([7], False, {"TWEEPY_BENCH_WINDOW": "30"})
    variant.variant, variant.out = {"TWEEPY_GEVENT": "0", "TWEEPY_PROCESSES": "4"}, "results/sync"
    assert plan.command_of(asdict(variant), every) == (
        'TWEEPY_BENCH_WINDOW=30 .venv/bin/python -m tools.bench --stages "7" '
        "--set TWEEPY_GEVENT=0 --set TWEEPY_PROCESSES=4 --out results/sync"
    )
    elsewhere = plan.make_plan([7], False, {"TWEEPY_BENCH_NETWORK_DELAY_MS": "1"})
    elsewhere.out = "results/delayed"
    assert plan.command_of(asdict(elsewhere), every) == (
        'TWEEPY_BENCH_NETWORK_DELAY_MS=1 .venv/bin/python -m tools.bench --stages "7" --out results/delayed'
    )


@pytest.mark.parametrize(
    "arguments, refusal",
    [
        (["--set", "TWEEPY_GEVENT=0"], "give it a folder of its own with --out"),
        (["--set", "GEVENT=0", "--out", "/tmp/x"], "expected a setting's variable=value"),
        (["--set", "TWEEPY_" + "NO_SUCH_THING=1", "--out", "/tmp/x"], "expected a setting's variable=value"),
    ],
)
def test_a_variant_names_real_settings_and_is_measured_into_a_folder_of_its_own(arguments, refusal, capsys):
    from tools.bench.__main__ import parse

    with pytest.raises(SystemExit):
        parse(arguments)
    assert refusal in capsys.readouterr().err
    assert parse(["--set", "TWEEPY_GEVENT=0", "--out", "/tmp/x"]).variant == {"TWEEPY_GEVENT": "0"}


# --- make bench QUICK=1, end to end ------------------------------------------------------------------


def quick_bench(out: Path, *arguments: str, **settings: str) -> tuple[Path, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--quick", "--out", str(out), *arguments],
        cwd=stages.ROOT,
        env={**os.environ, **settings},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text()), done.stdout


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    # The cold start and the herd are run once, below, on the default stage: every stage's would double the time.
    return quick_bench(tmp_path_factory.mktemp("bench"), TWEEPY_BENCH_COLD_WINDOWS="0")


@pytest.mark.integration
def test_quick_bench_starts_the_stage_afresh_for_a_cold_start_and_a_herd(tmp_path):
    # No overload step: the quick ladder has run stage 6's, and this run is for what comes after it.
    _, found, stdout = quick_bench(tmp_path, "--stages", "6", TWEEPY_BENCH_OVERLOAD="0")
    (result,) = found["stages"]
    cold = result["cold_start"]
    assert cold["state"] == "complete" and cold["users"] == result["best"]["users"]
    assert cold["ramp"]["by_request"][FIRST_LOGIN_KEY]["requests"] == cold["users"], "every visitor logged in anew"
    assert len(cold["windows"]) == 1 and cold["windows"][0]["tasks_per_s"] > 0
    assert cold["herd"]["users"] == 2 * cold["users"] and cold["recovery"]
    assert len(cold["herds"]) == 2 and cold["herd_figures"]["herds"] == 2, "a quick run's herds come twice"
    assert "goodput_pct_of_capacity" in cold["herd_figures"]
    assert f"| 6 vertical | {cold['users']} | " in (tmp_path / "RESULTS.md").read_text()
    assert "stage 6 vertical: cold start at" in stdout
    assert "stage 6 vertical · cold start · herd" in stdout, "progress is shown while it runs"


def windows_of(result: dict) -> list[dict]:
    return [s for s in [*result["steps"], result["overload"]] if s and "by_request" in s]


@pytest.mark.integration
def test_quick_bench_measures_every_stage_to_the_end_of_its_search(quick_report):
    _, found, _ = quick_report
    ladder = [(each.number, each.part) for stage in stages.all_stages() for each in (*stage.parts(), stage)]
    assert [(r["stage"], r["part"]) for r in found["stages"]] == ladder, "every step, each after its parts"
    for result in found["stages"]:
        assert result["search"]["state"] == "complete", result["search"]
        best = result["best"]
        assert best is not None, f"stage {result['stage']} missed the bar at a handful of users: {result['steps']}"
        assert best["failures"] == 0 and best["requests"] > 0 and best["p95_ms"] < 2000
        assert best["server_cpu_ms_per_request"] > 0, "server CPU is read from /proc"
        assert best["peak_server_memory_mb"] > 0
        assert result["ceiling"]["rps"] > 0 and result["ceiling"]["failures"] == 0
        assert result["capacity"]["windows"] == 1, "the quick plan's one window at capacity"
        assert all(step["spawn_rate"] >= 1 for step in result["steps"])
        if result["part"]:
            assert result["overload"] is None, "a part of a step is shown for its capacity, beside its step"
            continue
        assert result["overload"]["users"] == 2 * best["users"], "one step past the best, measured"
        assert result["overload"]["goodput_rps"] > 0
        assert 0 < result["overload"]["users_served_share"] <= 1, "who got a task through, counted"
    assert found["bcrypt"]["cost"] == 12, "the benchmark hashes at the app's default cost"


@pytest.mark.integration
def test_quick_bench_exercised_every_request_type_of_the_protocol_in_its_windows(quick_report):
    _, found, _ = quick_report
    seen = {
        name for r in found["stages"] for w in windows_of(r) for name, s in w["by_request"].items() if s["requests"]
    }
    # First logins happen in the ramps; the windows start once every user has logged in.
    assert seen >= set(REQUEST_TYPES) - {FIRST_LOGIN_KEY}


@pytest.mark.integration
def test_quick_bench_first_logins_all_succeeded_and_were_all_waited_for(quick_report):
    _, found, _ = quick_report
    for result in found["stages"]:
        for step in result["steps"]:
            assert step["ramp_complete"] and step["first_login_failures"] == 0
            assert step["ramp"]["by_request"][FIRST_LOGIN_KEY]["requests"] == step["first_logins"] == step["users"]


@pytest.mark.integration
def test_quick_bench_counted_as_many_hashes_as_successful_logins_and_registrations(quick_report):
    _, found, _ = quick_report
    requests = hashes = 0
    for result in found["stages"]:
        for window in windows_of(result):
            successful = {name: s["requests"] - s["failures"] for name, s in window["by_request"].items()}
            expected = successful.get("POST /", 0) + successful.get("POST /register/", 0)
            assert window["hashes"] == expected + successful.get(FIRST_LOGIN_KEY, 0)
            requests += window["requests"]
            hashes += window["hashes"]
    # 3 in 247 (1.2%) by the protocol; bounds wide enough for a quick run's small samples.
    assert 0.003 < hashes / requests < 0.04, (hashes, requests)


@pytest.mark.integration
def test_quick_bench_writes_the_table_the_chart_and_raw_csvs(quick_report):
    out, found, stdout = quick_report
    table = (out / "RESULTS.md").read_text()
    for stage in stages.all_stages():
        assert f"| {stage.number} {stage.name} | {found['date']}, {found['commit']} |" in table
    assert "bcrypt cost 12" in table
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for result in found["stages"]:  # one picture a stage, and one a part of a step
        assert (out / charts.chart_name(result)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 3 database, indexes |" in table
    assert list((out / "raw").glob("stage*_stats.csv"))
    assert 0 < (out / "raw.tar.xz").stat().st_size < 1_000_000, "the raw data, compressed, small enough to commit"
    assert "stage 6 vertical · step 1/1 · window" in stdout, "progress is shown while it runs"
    assert "stage 6 vertical · overload step" in stdout


def test_the_tier_table_projects_the_cores_each_tier_needs_for_1k_qps():
    result = {
        "stage": 7, "name": "scale-out", "processes": 4, "nodes": 2,
        "run": {"date": "today", "commit": "abc"},
        "best": {"tier_cpu_ms_per_request": {"front": 0.2, "app": 5.0, "postgresql": 0.5}},
    }  # fmt: skip
    lines = deployment.tier_table({"stages": [result]})
    row = next(line for line in lines if line.startswith("| 7 scale-out"))
    assert "front 0.2, app 5.0, postgresql 0.5" in row
    assert "app hosts of 4 cores: 2" in row, "5 cores of app at 1K QPS need a second 4-core host"
    assert deployment.tier_table({"stages": [{**result, "best": {}}]}) == []


def test_a_scaled_out_stage_readme_projects_its_1k_qps_deployment_and_one_host_does_not():
    tiers = {"front": 0.2, "app": 5.0, "postgresql": 0.5, "redis": 0.3}
    scaled = a_stage(7, "scale-out", nodes=2)
    scaled["best"] = {**scaled["best"], "tier_cpu_ms_per_request": tiers}
    readme = publishing.stage_figures(a_report(a_stage(), scaled), scaled, "link")
    projected = "projects 5.0 cores of app nodes (2 hosts of 4 cores), and nginx 0.2, PostgreSQL 0.5, Redis 0.3 cores"
    assert projected in readme
    one_host = a_stage(nodes=1)
    one_host["best"] = {**one_host["best"], "tier_cpu_ms_per_request": {"front": 0.2, "app": 5.0}}
    assert "projects" not in publishing.stage_figures(a_report(one_host), one_host, "link")


def test_a_part_of_a_step_comes_before_its_step_with_a_readme_block_of_its_own(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- bench:indexes:start -->\nold\n<!-- bench:indexes:end -->\nmore\n")
    publishing.replace_block(readme, "the part's figures", "indexes")
    publishing.replace_block(readme, "the step's figures")
    text = readme.read_text()
    assert "old" not in text
    assert "<!-- bench:indexes:start -->\nthe part's figures\n<!-- bench:indexes:end -->\nmore" in text
    assert text.rstrip().endswith("<!-- bench:start -->\nthe step's figures\n<!-- bench:end -->")
    results = [{"stage": 4}, {"stage": 3, "part": None}, {"stage": 3, "part": "indexes"}]
    ordered = sorted(results, key=runs.in_ladder_order)
    assert [(r["stage"], r.get("part")) for r in ordered] == [(3, "indexes"), (3, None), (4, None)]
    assert runs.talk_figure({"stage": 3, "part": "indexes"}) == "—"
    assert runs.talk_figure({"stage": 3}) == "250 QPS, 4 CPUs"


def test_a_bench_stopped_with_sigterm_leaves_through_its_finally_blocks_and_stops_what_it_started(tmp_path):
    """What ``served`` and the load generator rely on to stop their servers and locust: a ``kill`` of the
    bench must unwind it as Ctrl-C does, not end it where it stands."""
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tools.bench.__main__ import stop_cleanly_on_sigterm\n"
        "stop_cleanly_on_sigterm()\n"
        "try:\n"
        "    print('serving', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        f"    Path({str(tmp_path / 'stopped')!r}).write_text('servers stopped')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(machine.ROOT)}
    bench = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    assert bench.stdout.readline() == "serving\n"
    bench.terminate()
    assert bench.wait(timeout=30) == 128 + 15
    assert (tmp_path / "stopped").read_text() == "servers stopped"


def test_a_bench_stopped_while_its_load_runs_leaves_no_load_generator_behind(tmp_path):
    """What the bench starts for a measurement (locust) is killed when the measurement ends early, here by
    SIGTERM while it waits for the load, as a CI timeout or a person's ``kill`` would end it."""
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        "from tools.bench.__main__ import stop_cleanly_on_sigterm\n"
        "from tools.bench.measure import started\n"
        "stop_cleanly_on_sigterm()\n"
        "with started([sys.executable, '-c', 'import time; time.sleep(60)']) as load:\n"
        "    print(load.pid, flush=True)\n"
        "    load.wait()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(machine.ROOT)}
    bench = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    load_pid = int(bench.stdout.readline())
    bench.terminate()
    assert bench.wait(timeout=30) == 128 + 15
    with pytest.raises(ProcessLookupError):
        os.kill(load_pid, 0)


def test_a_second_process_serving_from_the_benchs_folder_is_refused_until_the_first_ends():
    """A bench, a profile and the tests' quick bench share var/bench/ and tweepy_bench: one at a time."""
    another = [sys.executable, "-c", "from tools.bench import serving\nwith serving.sole_user(): pass"]
    with serving.sole_user():
        refused = subprocess.run(another, cwd=stages.ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert f"var/bench/ is in use by process {os.getpid()}" in refused.stderr
    after = subprocess.run(another, cwd=stages.ROOT, capture_output=True, text=True, timeout=60)
    assert after.returncode == 0, after.stderr
