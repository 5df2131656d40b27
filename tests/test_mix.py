"""``make mix``: the protocol's requests that do not hash, in one process, and the CPU time a request."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers.services import postgres_url, redis_url
from tools import mix, stages

SMALL = ["--people", "10", "--requests", "400", "--rounds", "2", "--seed-users", "200", "--seed-tweets", "3000"]


@pytest.fixture(autouse=True)
def own_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(mix, "WORK", tmp_path / "mix")


def test_the_mix_sends_the_protocols_requests_that_do_not_hash_and_says_their_cpu_a_request(capsys):
    assert mix.main(["6", *SMALL]) == 0
    out = capsys.readouterr().out
    rounds = [float(ms) for ms in re.findall(r"round \d: ([\d.]+) ms of CPU a request", out)]
    assert len(rounds) == 2 and all(ms > 0 for ms in rounds)
    sent = ast.literal_eval(re.search(r"sent \(last round\): (\{.*\})", out).group(1))
    assert set(sent) == {
        "GET /tweets/", "POST /tweets/", "GET /users/?page=[n]", "POST /users/[name]/follow",
        "POST /users/[name]/unfollow",
    }  # fmt: skip
    assert sent["GET /tweets/"] > sum(sent.values()) / 2  # 200 of the 235 weights
    assert "not a benchmark" in out


def test_the_mix_says_the_cpu_of_each_type_of_request_and_of_the_floor_under_every_page(capsys):
    assert mix.main(["6", *SMALL]) == 0
    out = capsys.readouterr().out
    sent = ast.literal_eval(re.search(r"sent \(last round\): (\{.*\})", out).group(1))
    by_type = dict(re.findall(r"^  (\S+ \S+) +[\d.]+ ms +([\d,]+) requests$", out, re.MULTILINE))
    assert {name: int(count.replace(",", "")) for name, count in by_type.items()} == sent
    floors = {what: float(ms) for what, ms in re.findall(r"^(.+): ([\d.]+) ms$", out, re.MULTILINE)}
    around_views = next(ms for what, ms in floors.items() if what.startswith("around any view"))
    assert 0 < floors["Flask alone, the same view"] < around_views  # the stage's hooks cost something
    assert floors["a timeline read again, nothing changed"] > 0


def test_requests_go_straight_to_the_app_and_keep_the_cookies_it_sets_as_a_browser_does():
    app = mix.build_app(stages.get_stage(6), 50, 500)
    mix.add_floor(app)
    cookies: dict[str, str] = {}
    assert mix.send(app, cookies, "GET", mix.FLOOR)[0] == 302  # to the login form: nobody is logged in
    person = mix.Person(app, 1, 50)  # logs in through the form, as the locustfile does
    assert "session" in person.cookies
    assert person.send("GET", mix.FLOOR) == (200, b"ok")
    assert person.form("/logout/", {}) == 303
    assert person.send("GET", mix.FLOOR)[0] == 302  # whatever cookie the log out left, it logs nobody in


def test_the_mix_takes_the_tasks_and_weights_of_the_protocol_that_send_one_request_and_hash_nothing():
    assert mix.MIX == {"list_tweets": 200, "write_tweet": 20, "list_users": 5, "follow": 5, "unfollow": 5}


def test_answers_other_than_a_page_or_a_redirect_stop_the_mix(capsys, monkeypatch):
    monkeypatch.setattr(mix, "csrf_token_of", lambda page: None)  # every form then fails its CSRF check
    assert mix.main(["6", *SMALL]) == 1
    assert "unexpected answers" in capsys.readouterr().out


def test_a_stage_on_postgresql_and_redis_counts_their_cpu_beside_the_apps(capsys, monkeypatch, tmp_path):
    postgres_url(), redis_url()
    monkeypatch.setenv("TWEEPY_INSTANCE_PATH", str(tmp_path / "instance"))  # where the role's password is kept
    monkeypatch.setenv("PGPASSFILE", "")  # set by the mix for its own connections; put back after
    on_postgresql = [s for s in stages.all_stages() if s.app_setting("DATABASE_URL").startswith("postgresql")]
    assert mix.main([str(on_postgresql[0].number), *SMALL, "--people", "50", "--requests", "2000"]) == 0
    out = capsys.readouterr().out
    rounds = re.findall(
        r"round \d: ([\d.]+) ms of CPU a request: this process ([\d.]+), PostgreSQL ([\d.]+), Redis ([\d.]+)", out
    )
    assert len(rounds) == 2
    for total, app, postgresql, redis in ([float(ms) for ms in each] for each in rounds):
        assert app > 0 and postgresql > 0 and redis >= 0  # Redis may spend less than a clock tick
        assert total == pytest.approx(app + postgresql + redis, abs=0.002)
    assert re.search(r"median with PostgreSQL and Redis: [\d.]+ ms of CPU a request", out)


def test_the_profile_says_how_many_function_calls_a_request_made(capsys):
    assert mix.main(["6", *SMALL, "--rounds", "1", "--profile"]) == 0
    assert re.search(r"\d+ function calls a request", capsys.readouterr().out)
