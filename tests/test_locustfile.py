"""The benchmark protocol's own logic, without running locust: the verdict, the bar's settings,
reading CSRF tokens from pages, new user names and the task mix."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from helpers.pages import csrf_token

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locustfile.py"


@pytest.fixture(scope="module")
def protocol():
    """The locustfile as a module. Importing locust would monkey-patch the whole test process
    with gevent (threads, sockets, subprocesses), so it is told not to, for this import only."""
    with pytest.MonkeyPatch.context() as env:
        if "locust" not in sys.modules:
            env.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")
        for name in ("TWEEPY_SEED_USERS", "TWEEPY_PAGE_SIZE", "TWEEPY_BAR_P95_MS", "TWEEPY_BAR_FAILURES"):
            env.delenv(name, raising=False)
        spec = importlib.util.spec_from_file_location("tweepy_locustfile", LOCUSTFILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


# The verdict


def test_bar_met_with_fast_answers_and_no_failures(protocol):
    ok, line = protocol.verdict(num_requests=18_000, num_failures=0, p95_ms=180, rps=312.44)
    assert ok
    assert line.startswith("BAR MET: 312.4 req/s, p95 180 ms, 0 failures in 18000 requests")


def test_one_failure_misses_the_default_bar(protocol):
    ok, line = protocol.verdict(num_requests=18_000, num_failures=1, p95_ms=180, rps=300)
    assert not ok
    assert line.startswith("BAR MISSED: 300.0 req/s, p95 180 ms, 1 failures")
    assert line.endswith("too many failures")


def test_p95_must_stay_strictly_below_the_bar(protocol):
    assert protocol.verdict(1000, 0, 1999, 100)[0]
    ok, line = protocol.verdict(1000, 0, 2000, 100)
    assert not ok
    assert line.endswith("p95 too slow")


def test_slow_and_failing_run_names_both_misses(protocol):
    ok, line = protocol.verdict(1000, 5, 4500, 80)
    assert not ok
    assert line.endswith("p95 too slow, too many failures")


def test_a_run_without_requests_misses_the_bar(protocol):
    ok, line = protocol.verdict(0, 0, 0, 0.0)
    assert not ok
    assert "no requests were made" in line


def test_a_looser_bar_allows_what_the_default_refuses(protocol):
    bar = protocol.Bar(max_p95_ms=5000, max_failures=3)
    ok, line = protocol.verdict(1000, 3, 4000, 50, bar)
    assert ok
    assert "(bar: p95 < 5000 ms, at most 3 failures)" in line


def test_verdict_is_one_line(protocol):
    for args in [(10, 0, 10, 1.0), (10, 10, 10_000, 1.0)]:
        assert "\n" not in protocol.verdict(*args)[1]


# The bar's settings


def test_bar_defaults_to_the_issue(protocol):
    assert protocol.bar_from_env({}) == protocol.Bar(max_p95_ms=2000, max_failures=0)
    assert protocol.BAR == protocol.Bar(max_p95_ms=2000, max_failures=0)


def test_bar_comes_from_the_environment(protocol):
    bar = protocol.bar_from_env({"TWEEPY_BAR_P95_MS": "1500", "TWEEPY_BAR_FAILURES": "2"})
    assert bar == protocol.Bar(max_p95_ms=1500, max_failures=2)
    assert protocol.bar_from_env({"TWEEPY_BAR_P95_MS": " ", "TWEEPY_BAR_FAILURES": ""}) == protocol.Bar()


@pytest.mark.parametrize(
    "setting",
    [
        {"TWEEPY_BAR_P95_MS": "fast"},
        {"TWEEPY_BAR_P95_MS": "0"},
        {"TWEEPY_BAR_P95_MS": "nan"},
        {"TWEEPY_BAR_FAILURES": "-1"},
        {"TWEEPY_BAR_FAILURES": "0.5"},
    ],
)
def test_a_bad_bar_setting_is_refused_by_name(protocol, setting):
    (name,) = setting
    with pytest.raises(ValueError, match=name):
        protocol.bar_from_env(setting)


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


def test_one_token_stays_valid_across_registering_logging_out_and_in(protocol, client):
    """The protocol re-uses the last page's token after a log in or out; this makes that legitimate."""
    token = protocol.csrf_token_of(client.get("/register/").get_data(as_text=True))
    fields = {"name": "bob", "email": "bob@example.com", "password": "tweepy123", "confirm": "tweepy123"}
    assert client.post("/register/", data={**fields, "csrf_token": token}).status_code == 303
    assert client.post("/tweets/", data={"tweet": "hello", "csrf_token": token}).status_code == 303
    assert client.post("/logout/", data={"csrf_token": token}).status_code == 303
    login = {"name": "bob", "password": "tweepy123", "csrf_token": token}
    assert client.post("/", data=login).status_code == 303
    assert client.post("/tweets/", data={"tweet": "again", "csrf_token": token}).status_code == 303


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
    assert weights == {
        "register": 1,
        "log_out_and_in": 2,
        "list_tweets": 200,
        "write_tweet": 20,
        "list_users": 5,
        "follow": 5,
        "unfollow": 5,
    }


def test_users_think_between_half_a_second_and_a_second_and_a_half(protocol):
    waits = [protocol.Visitor.wait_time(None) for _ in range(200)]
    assert all(0.5 <= wait <= 1.5 for wait in waits)


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
    from tools import bench_shape

    assert bench_shape.FIRST_LOGIN == ("POST", protocol.FIRST_LOGIN)
