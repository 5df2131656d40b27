"""The benchmark protocol's own logic, without running locust: the per-request-type verdict, the
bar's settings, reading CSRF tokens from pages, new user names, the task mix, and the capacity
search's load shape driven by made-up statistics."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.pages import csrf_token

from tools import protocol as shared

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locustfile.py"


@pytest.fixture(scope="module")
def protocol():
    """The locustfile as a module. Importing locust would monkey-patch the whole test process
    with gevent (threads, sockets, subprocesses), so it is told not to, for this import only."""
    with pytest.MonkeyPatch.context() as env:
        if "locust" not in sys.modules:
            env.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")
        for setting in shared.SETTINGS:
            env.delenv(setting.name, raising=False)
        spec = importlib.util.spec_from_file_location("tweepy_locustfile", LOCUSTFILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def stats(name, requests, failures=0, p95=10):
    return shared.RequestStats(name, requests, failures, p95)


def total(requests, failures=0, p95=10):
    return shared.RequestStats(shared.AGGREGATED, requests, failures, p95)


TIMELINE = stats("GET /tweets/", 17_000, p95=150)


# The verdict: every request type under the bar


def test_bar_met_with_fast_answers_and_no_failures(protocol):
    ok, line = protocol.verdict([TIMELINE, stats("POST /", 150, p95=400)], total(18_000, p95=180), rps=312.44)
    assert ok
    assert line.startswith("BAR MET: 312.4 req/s, p95 180 ms, 0 failures in 18000 requests; slowest: POST / p95 400 ms")


def test_a_slow_login_misses_the_bar_even_when_the_aggregate_p95_is_fast(protocol):
    ok, line = protocol.verdict([TIMELINE, stats("POST /", 150, p95=16_000)], total(18_000, p95=180), rps=300)
    assert not ok
    assert line.endswith(": p95 too slow for POST / (16000 ms)")


def test_slow_first_logins_and_registrations_miss_the_bar_too(protocol):
    slow = [stats(shared.FIRST_LOGIN_KEY, 400, p95=29_000), stats("POST /register/", 80, p95=2500), TIMELINE]
    ok, line = protocol.verdict(slow, total(18_000, p95=180), rps=300)
    assert not ok
    assert line.endswith(f": p95 too slow for {shared.FIRST_LOGIN_KEY} (29000 ms), POST /register/ (2500 ms)")


def test_a_request_type_with_fewer_than_the_minimum_requests_is_not_judged(protocol):
    rare = stats("POST /register/", shared.Bar().min_requests - 1, p95=9000)
    ok, line = protocol.verdict([TIMELINE, rare], total(17_004, p95=150), rps=300)
    assert ok
    assert "slowest: GET /tweets/ p95 150 ms" in line
    assert not protocol.verdict([TIMELINE, stats("POST /register/", shared.Bar().min_requests, p95=9000)], total(1), 1)[
        0
    ]


def test_one_failure_misses_the_default_bar_and_names_its_request_type(protocol):
    ok, line = protocol.verdict([TIMELINE, stats("POST /tweets/", 900, failures=1)], total(18_000, 1, 180), rps=300)
    assert not ok
    assert line.startswith("BAR MISSED: 300.0 req/s, p95 180 ms, 1 failures")
    assert line.endswith(": 1 failures (POST /tweets/ 1)")


def test_p95_must_stay_strictly_below_the_bar(protocol):
    assert protocol.verdict([stats("GET /tweets/", 1000, p95=1999)], total(1000, p95=1999), 100)[0]
    ok, line = protocol.verdict([stats("GET /tweets/", 1000, p95=2000)], total(1000, p95=2000), 100)
    assert not ok
    assert line.endswith(": p95 of all requests too slow (2000 ms); p95 too slow for GET /tweets/ (2000 ms)")


def test_a_run_without_requests_misses_the_bar(protocol):
    ok, line = protocol.verdict([], total(0, p95=0), 0.0)
    assert not ok
    assert "no requests were made" in line


def test_a_looser_bar_allows_what_the_default_refuses(protocol):
    bar = shared.Bar(max_p95_ms=5000, max_failures=3)
    ok, line = protocol.verdict([stats("POST /", 100, 3, 4000)], total(1000, 3, 4000), 50, bar)
    assert ok
    assert "(bar: p95 < 5000 ms for all requests and for every request type with at least 5 requests, " in line
    assert "at most 3 failed request(s))" in line


def test_verdict_is_one_line(protocol):
    for by_type, whole in [([], total(10)), ([stats("POST /", 10, 10, 10_000)], total(10, 10, 10_000))]:
        assert "\n" not in protocol.verdict(by_type, whole, 1.0)[1]


def test_the_verdict_reads_locusts_own_stats(protocol):
    from locust.stats import RequestStats as LocustStats

    collection = LocustStats()
    for ms in [100] * 19 + [5000]:
        collection.log_request("POST", "/", ms, 0)
    collection.log_request("GET", "/tweets/", 10, 0)
    by_type, whole = shared.from_locust(collection)
    assert {t.name: t.requests for t in by_type} == {"POST /": 20, "GET /tweets/": 1}
    assert whole.requests == 21 and max(t.max_ms for t in by_type) == 5000


# The bar's settings


def test_bar_defaults_to_the_talks(protocol):
    assert protocol.bar_from_env({}) == shared.Bar(max_p95_ms=2000, max_failures=0, min_requests=5)
    assert shared.Bar(max_p95_ms=2000, max_failures=0, min_requests=5) == protocol.BAR


def test_bar_comes_from_the_environment(protocol):
    environ = {"TWEEPY_BAR_P95_MS": "1500", "TWEEPY_BAR_FAILURES": "2", "TWEEPY_BAR_MIN_REQUESTS": "20"}
    assert protocol.bar_from_env(environ) == shared.Bar(max_p95_ms=1500, max_failures=2, min_requests=20)
    assert protocol.bar_from_env({"TWEEPY_BAR_P95_MS": " ", "TWEEPY_BAR_FAILURES": ""}) == shared.Bar()


@pytest.mark.parametrize(
    "setting",
    [
        {"TWEEPY_BAR_P95_MS": "fast"},
        {"TWEEPY_BAR_P95_MS": "0"},
        {"TWEEPY_BAR_P95_MS": "nan"},
        {"TWEEPY_BAR_FAILURES": "-1"},
        {"TWEEPY_BAR_FAILURES": "0.5"},
        {"TWEEPY_BAR_MIN_REQUESTS": "0"},
    ],
)
def test_a_bad_bar_setting_is_refused_by_name(protocol, setting):
    (name,) = setting
    with pytest.raises(ValueError, match=name):
        protocol.bar_from_env(setting)


def test_every_bench_setting_is_declared_once_with_a_default_and_a_help():
    names = [s.name for s in shared.SETTINGS]
    assert len(names) == len(set(names))
    assert all(s.help and s.default is not None for s in shared.SETTINGS)
    sources = [LOCUSTFILE, *LOCUSTFILE.parent.glob("tools/bench*.py"), *LOCUSTFILE.parent.glob("tools/bench/*.py")]
    for source in sources:
        for variable in re.findall(r"TWEEPY_(?:BENCH|BAR)_[A-Z0-9_]+|TWEEPY_SEED_USERS", source.read_text()):
            assert variable in names, f"{variable} in {source.name}"


def test_the_seed_password_is_the_one_the_seed_command_uses():
    from tweepy.cli import SEED_PASSWORD

    assert shared.SEED_PASSWORD == SEED_PASSWORD


# CSRF tokens


def test_token_read_from_a_wtforms_hidden_input(protocol):
    page = """<form method="post"><input id="csrf_token" name="csrf_token" type="hidden"
        value="IjdkZjM4YTFi.ZxYz-AbC_12"><input id="name" name="name" type="text" value=""></form>"""
    assert protocol.csrf_token_of(page) == "IjdkZjM4YTFi.ZxYz-AbC_12"


def test_token_read_whatever_the_attribute_order_and_quotes(protocol):
    assert protocol.csrf_token_of("<INPUT value='abc.def' type=hidden name='csrf_token'>") == "abc.def"
    assert protocol.csrf_token_of('<input type="hidden" value=tok.en name=csrf_token />') == "tok.en"
    assert protocol.csrf_token_of('<input name="csrf_token" value="a&amp;b">') == "a&b"


def test_the_first_token_of_the_page_is_taken(protocol):
    page = '<input name="csrf_token" value="first"><input name="csrf_token" value="second">'
    assert protocol.csrf_token_of(page) == "first"


def test_no_token_on_a_page_without_one(protocol):
    assert protocol.csrf_token_of("<p>No forms here</p>") is None
    assert protocol.csrf_token_of('<input name="csrf_token_old" value="nope">') is None
    assert protocol.csrf_token_of('<input name="csrf_token" value="">') is None
    assert protocol.csrf_token_of('<input name="csrf_token">') is None


def test_token_read_from_the_real_pages_the_protocol_fetches(protocol, client, browser):
    for url in ["/", "/register/"]:
        page = client.get(url)
        assert protocol.csrf_token_of(page.get_data(as_text=True)) == csrf_token(page)
    assert browser.register("alice").status_code == 303
    for url in ["/tweets/", "/users/?page=1"]:
        page = client.get(url)
        assert page.status_code == 200
        assert protocol.csrf_token_of(page.get_data(as_text=True)) == csrf_token(page)


def test_the_page_a_login_or_registration_lands_on_carries_the_token_the_next_form_needs(protocol, client):
    """The app gives a new session a new token; the protocol reads it from the timeline it lands on."""
    token = protocol.csrf_token_of(client.get("/register/").get_data(as_text=True))
    fields = {"name": "bob", "email": "bob@example.com", "password": "tweepy123", "confirm": "tweepy123"}
    assert client.post("/register/", data={**fields, "csrf_token": token}).status_code == 303
    assert client.post("/tweets/", data={"tweet": "old token", "csrf_token": token}).status_code == 400
    token = protocol.csrf_token_of(client.get("/tweets/").get_data(as_text=True))
    assert client.post("/tweets/", data={"tweet": "hello", "csrf_token": token}).status_code == 303
    assert client.post("/logout/", data={"csrf_token": token}).status_code == 303
    token = protocol.csrf_token_of(client.get("/").get_data(as_text=True))
    assert client.post("/", data={"name": "bob", "password": "tweepy123", "csrf_token": token}).status_code == 303
    token = protocol.csrf_token_of(client.get("/tweets/").get_data(as_text=True))
    assert client.post("/tweets/", data={"tweet": "again", "csrf_token": token}).status_code == 303


def test_locust_users_of_one_process_get_accounts_of_their_own(protocol, monkeypatch):
    monkeypatch.setattr(protocol, "SEED_USERS", 50)
    accounts = [protocol.next_seed_account() for _ in range(50)]
    assert sorted(accounts) == list(range(1, 51))


def test_worker_processes_take_different_accounts(protocol, monkeypatch):
    monkeypatch.setattr(protocol, "SEED_USERS", 1000)
    monkeypatch.setenv("LOCUST_PROCESSES", "2")
    first = {protocol.next_seed_account(0) for _ in range(100)}
    second = {protocol.next_seed_account(1) for _ in range(100)}
    assert not first & second


# How many users were seeded, asked of the server


@pytest.mark.parametrize("seeded", [2, 3, 30, 1000, 1024, 1025, 10_000])
def test_the_seeded_users_are_counted_in_few_questions(protocol, seeded):
    asked = []

    def exists(k):
        asked.append(k)
        return k <= seeded

    assert protocol.count_seeded(exists) == seeded
    assert len(asked) <= 2 * seeded.bit_length() + 1


def test_a_database_without_user1_is_refused_in_words(protocol):
    with pytest.raises(LookupError, match="no user1"):
        protocol.count_seeded(lambda k: False)


def test_a_server_where_every_name_exists_is_refused_rather_than_asked_forever(protocol):
    with pytest.raises(LookupError, match="do not stop"):
        protocol.count_seeded(lambda k: True, most=64)


def test_a_server_that_cannot_answer_is_refused_in_words(protocol):
    exists = protocol.user_exists_at("http://127.0.0.1:9")  # the discard port: nobody listens
    with pytest.raises(LookupError, match="no answer"):
        exists(1)


def test_without_a_count_a_user_stops_before_sending_anything(protocol, monkeypatch):
    monkeypatch.setattr(protocol, "SEED_USERS", 0)
    stopped = []
    visitor = object.__new__(protocol.Visitor)
    visitor.stop = lambda: stopped.append(True)
    visitor.log_in = lambda name=None: pytest.fail("a user without an account logged in")
    protocol.Visitor.on_start(visitor)
    assert stopped == [True]


# New users and the task mix


def test_new_user_names_are_valid_and_unique(protocol):
    names = {protocol.new_user_name() for _ in range(1000)}
    assert len(names) == 1000
    assert all(re.fullmatch(r"[A-Za-z0-9_]{3,32}", name) for name in names)
    assert not any(re.fullmatch(r"user\d+", name) for name in names)


def test_task_mix_is_the_talks(protocol):
    weights = {}
    for task in protocol.Visitor.tasks:
        weights[task.__name__] = weights.get(task.__name__, 0) + 1
    talk = {"register": 1, "log_out_and_in": 2, "list_tweets": 200, "write_tweet": 20}
    assert weights == shared.WEIGHTS == {**talk, "list_users": 5, "follow": 5, "unfollow": 5}


def test_the_protocols_docstring_says_what_it_does_not_where_it_came_from(protocol):
    assert "issue" not in protocol.__doc__.lower()


def test_users_think_between_half_a_second_and_a_second_and_a_half(protocol):
    waits = [protocol.Visitor.wait_time(None) for _ in range(200)]
    assert all(0.5 <= wait <= 1.5 for wait in waits)


def test_a_visitor_waits_as_long_as_a_refusals_retry_after_asks(protocol):
    assert protocol.retry_after_s("7") == 7.0
    assert protocol.retry_after_s(None) == 0.0
    assert protocol.retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT") == 0.0  # the date form: no wait
    assert protocol.retry_after_s("-3") == 0.0


def test_unexpected_answers_are_explained_without_per_user_details(protocol):
    assert protocol.explain(302, "http://127.0.0.1:5000/?next=%2Ftweets%2F") == "302 redirect to /"
    assert protocol.explain(400, None, "<h1>400 · Form expired</h1>") == "400 CSRF token rejected"
    assert protocol.explain(401, None, '<p class="error">Wrong name or password.</p>') == (
        "401 form error: Wrong name or password."
    )
    assert protocol.explain(0, error=ConnectionRefusedError("[Errno 111]")) == "no answer (ConnectionRefusedError)"
    assert protocol.explain(500) == "500"


def test_importing_the_protocol_left_the_process_unpatched(protocol):
    import socket

    assert not socket.socket.__module__.startswith("gevent")
    assert "LOCUST_SKIP_MONKEY_PATCH" not in os.environ


def test_the_benchmark_waits_for_the_first_logins_under_the_protocols_name(protocol):
    assert protocol.FIRST_LOGIN == shared.FIRST_LOGIN
    assert shared.FIRST_LOGIN_KEY == "POST " + protocol.FIRST_LOGIN


# The capacity search's load shape, driven by made-up statistics and a made-up clock


class FakeEntry:
    def __init__(self, method="", name="Aggregated"):
        self.method, self.name = method, name
        self.num_requests = self.num_failures = 0
        self.p95 = self.max_response_time = 0
        self.current_rps = 0.0

    def get_response_time_percentile(self, _quantile):
        return self.p95

    get_current_response_time_percentile = get_response_time_percentile


class FakeStats:
    """What the shape reads of locust's stats: entries by (name, method), their total, a reset."""

    def __init__(self):
        self.entries, self.errors = {}, {}

    def get(self, name, method):
        return self.entries.setdefault((name, method), FakeEntry(method, name))

    def log(self, key, requests, failures=0, p95=10):
        method, name = key.split(" ", 1)
        entry = self.get(name, method)
        entry.num_requests += requests
        entry.num_failures += failures
        entry.p95 = entry.max_response_time = max(entry.p95, p95)

    @property
    def total(self):
        whole = FakeEntry()
        for entry in self.entries.values():
            whole.num_requests += entry.num_requests
            whole.num_failures += entry.num_failures
            whole.p95 = whole.max_response_time = max(whole.p95, entry.p95)
        return whole

    def reset_all(self):
        self.entries.clear()


class FakeRunner:
    def __init__(self):
        self.stats, self.user_count = FakeStats(), 0
        self.user_greenlets = []  # FakeVisitor's, where a shape looks for who is running


class FakeVisitor:
    """A running locust user as a shape sees it: the first argument of its greenlet, which stopping removes."""

    def __init__(self, runner):
        self.runner, self.stopped_by_force = runner, None
        self.greenlet = SimpleNamespace(args=(self,))
        runner.user_greenlets.append(self.greenlet)

    def stop(self, force=False):
        self.stopped_by_force = force
        self.runner.user_greenlets.remove(self.greenlet)


def driven(module, shape_class, settings: dict[str, str], monkeypatch):
    """A load shape made with these settings, on a fake runner and a clock that ``later(seconds)`` moves
    before asking the shape what it wants (as locust's runner does every second)."""
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    shape = shape_class()
    shape.runner = FakeRunner()

    def later(seconds):
        clock[0] += seconds
        return shape.tick()

    return shape, later


@pytest.fixture
def search(protocol, tmp_path, monkeypatch):
    """A SteppedCapacity for steps of 10 and 20 users, 30 s windows, no warm-up, a 60 s ramp limit."""
    from tools.bench import capacity_shape

    settings = {
        "TWEEPY_BENCH_STEPS": "10 20",
        "TWEEPY_BENCH_WINDOW": "30",
        "TWEEPY_BENCH_WARMUP": "0",
        "TWEEPY_BENCH_RAMP_LIMIT": "60",
        "TWEEPY_BENCH_OUT": str(tmp_path / "steps.json"),
    }
    return driven(capacity_shape, capacity_shape.SteppedCapacity, settings, monkeypatch)


def log_in(shape, users, failures=0, p95=500):
    shape.runner.user_count = users
    shape.runner.stats.log(shared.FIRST_LOGIN_KEY, users, failures, p95)


def serve(shape, requests, failures=0, p95=30):
    shape.runner.stats.log("GET /tweets/", requests, failures, p95)


def test_a_failed_first_login_during_a_ramp_misses_the_step_though_its_window_is_clean(search):
    shape, later = search
    assert later(0) == (10, shape.spawn_rate), "the first step ramps its users"
    log_in(shape, 10, failures=1)
    later(1)  # the ramp is over: the window starts with fresh statistics
    serve(shape, 300)
    later(30)
    step = shape.results[0]
    assert not step["met_bar"] and step["window_met"]
    assert step["reasons"] == [f"ramp: 1 failures ({shared.FIRST_LOGIN_KEY} 1)"]
    assert shape.state == "done", "no step met the bar, so there is no overload step"
    assert later(1) is None


def test_a_ramp_that_never_finishes_misses_its_step_with_the_reason(search):
    shape, later = search
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)
    later(30)
    assert shape.results[0]["met_bar"]
    assert later(0) == (20, shape.spawn_rate)
    shape.runner.user_count = 15  # five users never start, and only five of the new ones log in
    shape.runner.stats.log(shared.FIRST_LOGIN_KEY, 5)
    later(61)
    step = shape.results[1]
    assert not step["met_bar"]
    assert step["reasons"][0] == "ramp not finished in 60s: 15 of 20 users running, 5 of 10 first logins"
    assert shape.state == "confirming" and shape.target == 10, "then the capacity step, measured again"


def measure_again(shape, later, users, *served):
    """The shape back at a step of ``users`` (the users past it stopped), one window a ``served`` figure."""
    shape.runner.user_count = users
    later(1)  # settled: the first window again at this step starts
    for requests in served:
        assert shape.state == "confirming" and shape.phase == "window" and shape.target == users
        serve(shape, *requests) if isinstance(requests, tuple) else serve(shape, requests)
        later(30)


def test_the_capacity_step_is_measured_until_it_rests_on_three_windows_and_its_median_is_the_headline(search):
    shape, later = search
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)
    later(30)
    log_in(shape, 20, p95=4000)  # the second step's first logins are too slow
    later(1)
    serve(shape, 450)
    later(30)
    assert [s["met_bar"] for s in shape.results] == [True, False]
    assert shape.state == "confirming" and shape.target == 10
    measure_again(shape, later, 10, 270, 330)  # 9 and 11 requests a second, beside the search's 10
    step = shape.results[0]
    assert len(step["repeats"]) == 2 and step["spawn_rate"] == shape.spawn_rate
    assert shape.capacity["windows"] == 3 and shape.capacity["users"] == 10
    assert shape.capacity["rps"] == {"median": 10.0, "min": 9.0, "max": 11.0}
    assert shape.state == "overload" and shape.target == 20, "then the overload step, at twice the capacity's users"


def test_a_capacity_step_whose_median_misses_gives_way_to_the_step_below_measured_again(search):
    shape, later = search
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)
    later(30)
    log_in(shape, 20)
    later(1)
    serve(shape, 600)
    later(30)
    assert shape.results[1]["met_bar"] and shape.ended.startswith("every step met the bar")
    measure_again(shape, later, 20, (600, 2), (600, 1))  # two of its three windows fail requests
    assert shape.capacity is None or shape.capacity["users"] != 20
    measure_again(shape, later, 10, 300, 300)
    assert shape.capacity["users"] == 10 and shape.capacity["windows"] == 3
    assert shape.state == "overload" and shape.target == 20


def test_the_overload_step_past_the_capacity_reports_its_goodput_in_completed_tasks(search):
    shape, later = search
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)  # 10 timelines a second: the capacity
    later(30)
    log_in(shape, 20, p95=4000)  # the second step's first logins are too slow
    later(1)
    serve(shape, 450)
    later(30)
    measure_again(shape, later, 10, 300, 300)
    assert shape.state == "overload"
    log_in(shape, 20)  # its ten new users log in
    later(1)
    serve(shape, 300, failures=60, p95=9000)
    shape.runner.stats.log("GET /", 500)  # refused visitors fetching the login form again: no task
    later(30)
    overload = shape.overload
    assert overload["users"] == 20 and overload["capacity_tasks_per_s"] == 10.0
    assert overload["goodput_tasks_per_s"] == 8.0 and overload["goodput_pct_of_capacity"] == 80.0
    assert overload["goodput_rps"] == 24.7, "its successful requests, login forms included, are kept apart"
    assert overload["failure_share"] == round(60 / 800, 4) and overload["max_ms"] == 9000
    assert shape.state == "done" and later(1) is None


# Who logs in, and who was served


def a_visitor(protocol, seed_index=7, runner=None):
    """A Visitor without locust around it: its requests answer as the stubs given to it say."""
    from types import SimpleNamespace

    visitor = object.__new__(protocol.Visitor)
    visitor.environment = SimpleNamespace(runner=runner)
    visitor.key, visitor.seed_index = "0-1", seed_index
    visitor.name, visitor.password = protocol.seeded_account(seed_index)
    visitor.token, visitor.retry_at, visitor.logged_in, visitor.followed = None, 0.0, True, set()
    return visitor


def test_a_visitor_who_registered_logs_in_next_as_its_own_seeded_account(protocol):
    visitor = a_visitor(protocol, seed_index=7)
    sent = []
    answers = {"/logout/": "/", "/register/": "/tweets/", "/": "/tweets/"}
    visitor._page = lambda path, name=None: True
    visitor._form = lambda path, fields, name=None, to=None: sent.append((path, fields, name)) or answers[path]
    protocol.Visitor.register(visitor)
    registered = sent[-1][1]["name"]
    assert sent[-1][0] == "/register/" and visitor.name == registered != "user7", "carries on as the new account"
    visitor.followed.add("user3")  # followed as the new account
    protocol.Visitor.log_out_and_in(visitor)
    path, fields, stats_name = sent[-1]
    assert path == "/" and (fields["name"], fields["password"]) == ("user7", shared.SEED_PASSWORD)
    assert stats_name is None, "counted as any log in, POST /"
    assert visitor.name == "user7" and visitor.logged_in
    assert not visitor.followed, "whom the new account followed is not the seeded one's"


def test_a_visitor_counts_as_served_only_once_a_request_ending_a_task_got_through(protocol, monkeypatch):
    served = shared.ServedVisitors()
    monkeypatch.setattr(protocol, "SERVED", served)
    visitor = a_visitor(protocol)
    for request in ("GET /", "POST /", "POST /logout/", "GET /register/"):  # a refused user's retries among them
        visitor._done(request)
    assert served.count() == 0
    visitor._done("GET /tweets/")
    visitor._done("POST /users/[name]/follow")
    assert served.count() == 1, "one visitor, however many tasks"
    served.start()
    assert served.count() == 0, "each window counts its own"


def test_a_worker_process_reports_its_served_visitors_to_the_master(protocol, monkeypatch):
    served = shared.ServedVisitors()
    monkeypatch.setattr(protocol, "SERVED", served)
    worker = object.__new__(protocol.WorkerRunner)  # only its kind is asked
    worker.greenlet = None
    visitor = a_visitor(protocol, runner=worker)
    visitor._done("GET /tweets/")
    assert served.count() == 0, "the worker does not count them: the master does"
    report = {}
    protocol._report_served_visitors("worker-1", report)
    assert report["tweepy_served"] == ["0-1"] and not protocol._served_since_report
    protocol._gather_served_visitors("worker-1", report)
    assert served.count() == 1


def test_the_capacity_step_rests_on_as_many_windows_as_the_setting_asks(protocol, tmp_path, monkeypatch):
    from tools.bench import capacity_shape

    settings = {
        "TWEEPY_BENCH_STEPS": "10",
        "TWEEPY_BENCH_WINDOW": "30",
        "TWEEPY_BENCH_WARMUP": "0",
        "TWEEPY_BENCH_CAPACITY_WINDOWS": "2",
        "TWEEPY_BENCH_OUT": str(tmp_path / "steps.json"),
    }
    shape, later = driven(capacity_shape, capacity_shape.SteppedCapacity, settings, monkeypatch)
    later(0)
    log_in(shape, 10)
    later(1)
    serve(shape, 300)
    later(30)
    measure_again(shape, later, 10, 330)
    assert shape.capacity["windows"] == 2 and len(shape.results[0]["repeats"]) == 1
    assert shape.state == "overload"
