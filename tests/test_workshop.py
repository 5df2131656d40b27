"""The workshop's own commands, run as an attendee types them: comparing two steps, the stage
branches, and locust's web UI against a running stage."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tools import branches, compare, stages
from tools.bench import runs

ROOT = stages.ROOT


# --- make compare ------------------------------------------------------------------------------


def test_compare_shows_each_changed_setting_and_the_function_it_switches_on():
    text = compare.compare(stages.get_stage(3), stages.get_stage(4))
    assert text.startswith("stage 3 database  ->  stage 4 cache")
    assert "TWEEPY_CACHE: none (default) -> local" in text
    assert "tweepy/cache/hooks.py" in text and "(backend_for)" in text
    assert "TWEEPY_TIMELINE_FROM_CACHED_PAGES: False (default) -> true" in text
    assert "tweepy/queries.py" in text and "(init_app)" in text
    assert "tweepy/fragments.py" in text
    assert "TWEEPY_SQLITE_TUNED" not in text, "a setting both stages share is no change"


def test_compare_names_the_migration_a_new_schema_revision_adds():
    text = compare.compare(stages.get_stage(2), stages.get_stage(3, "indexes"))
    assert "TWEEPY_SCHEMA_REVISION: 0002 -> head" in text
    assert "migrations/versions/0003_timeline_indexes.py" in text
    assert "TWEEPY_SQLITE_TUNED" not in text, "the indexes part leaves the pragmas to the whole step"


def test_compare_shows_what_each_part_of_a_step_turns_on():
    reads = compare.compare(stages.get_stage(3), stages.get_stage(4, "reads"))
    assert reads.startswith("stage 3 database  ->  stage 4 cache, reads")
    assert "TWEEPY_CACHE: none (default) -> local" in reads
    assert "TIMELINE_FROM_CACHED_PAGES" not in reads and "FRAGMENT_CACHE" not in reads
    gevent = compare.compare(stages.get_stage(4), stages.get_stage(5, "gevent"))
    assert "TWEEPY_GEVENT: 0 (default) -> 100" in gevent and "TWEEPY_BCRYPT_IN_THREADPOOL" in gevent
    assert "TWEEPY_BCRYPT_LIBRARY" not in gevent, "the system's bcrypt is the rest of the step"


def test_make_compare_takes_a_part_of_the_step():
    done = subprocess.run(
        ["make", "-s", "compare", "A=4", "B=5", "PART=gevent"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == compare.compare(stages.get_stage(4), stages.get_stage(5, "gevent"))


def test_compare_points_serving_settings_at_the_stage_runner():
    text = compare.compare(stages.get_stage(4), stages.get_stage(5))
    assert "TWEEPY_GEVENT: 0 (default) -> 100" in text
    assert "tools/stages/model.py" in text and "(Stage.uwsgi_options)" in text
    assert "TWEEPY_BCRYPT_IN_THREADPOOL" in text and "tweepy/passwords.py" in text


def test_every_place_compare_points_at_is_a_line_that_names_the_setting():
    for a, b in zip(stages.all_stages(), stages.all_stages()[1:], strict=False):
        for line in compare.compare(a, b).splitlines():
            if line.strip().startswith("read in "):
                where = line.split("read in ", 1)[1].split(" (")[0]
                path, number = where.rsplit(":", 1)
                setting = next(
                    candidate.removeprefix("TWEEPY_")
                    for candidate in (a.settings | b.settings)
                    if candidate.removeprefix("TWEEPY_") in (ROOT / path).read_text().splitlines()[int(number) - 1]
                )
                assert setting, line


def test_make_compare_prints_the_comparison():
    done = subprocess.run(["make", "-s", "compare", "A=5", "B=6"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == compare.compare(stages.get_stage(5), stages.get_stage(6))


# --- the stage branches -----------------------------------------------------------------------


def run_branches(clone: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(stages.BIN / "python")}
    return subprocess.run(
        [str(clone / "stages" / "branches")], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )


def git_in(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


def stage_tips(clone: Path) -> dict[str, str]:
    lines = git_in(clone, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/stage-*")
    return dict(line.split() for line in lines.splitlines())


@pytest.fixture
def clone(tmp_path):
    """A fresh clone of this repository, its stage branches made."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    made = run_branches(clone)
    assert made.returncode == 0, made.stdout + made.stderr
    return clone


TOP_LEVEL = ["README.md", "nginx.conf", "stage.env", "stages/CURRENT", "uwsgi.ini"]


def test_each_stage_branch_holds_its_stages_configuration_at_the_top(clone):
    shared_ini = git_in(clone, "show", "HEAD:uwsgi.ini")
    for stage in stages.all_stages():
        branch = f"stage-{stage.number}"
        assert git_in(clone, "diff", "--name-only", "HEAD", branch).split() == TOP_LEVEL, branch
        assert git_in(clone, "show", f"{branch}:stages/CURRENT").strip() == str(stage.number)
        rendered = git_in(clone, "show", f"{branch}:stage.env")
        settings = dict(line.split("=", 1) for line in rendered.splitlines() if not line.startswith("#"))
        assert stage.settings.items() <= settings.items(), f"{branch}'s stage.env lost a setting of its folder"
        assert settings["TWEEPY_SERVER"] == stage.server
        if stage.server == "uwsgi":
            assert settings["TWEEPY_GEVENT"] == stage.get("GEVENT") and settings["TWEEPY_NODES"] == str(stage.nodes)
        readme = git_in(clone, "show", f"{branch}:README.md")
        first = readme.splitlines()[0]
        assert f"`{branch}`" in first and f"({stage.folder.relative_to(ROOT)}/README.md)" in first
        assert git_in(clone, "show", f"{branch}:uwsgi.ini").startswith(shared_ini.rstrip("\n") + "\n"), (
            "the shared uwsgi.ini is kept whole, the stage's own lines after it"
        )
    git_in(clone, "checkout", "-q", "stage-4")
    dry = subprocess.run(["make", "-n", "run"], cwd=clone, capture_output=True, text=True)
    assert "tools.stages run 4" in dry.stdout, dry.stdout + dry.stderr


def test_the_diff_of_two_stage_branches_shows_the_step(clone):
    concurrency = git_in(clone, "diff", "stage-4", "stage-5", "--", "uwsgi.ini", "stage.env")
    for line in ("-harakiri = 30", "+gevent = 100", "+TWEEPY_GEVENT=100", "+TWEEPY_BCRYPT_LIBRARY=libxcrypt"):
        assert f"\n{line}\n" in concurrency, line
    assert "\n+TWEEPY_CACHE=" not in concurrency and "\n-TWEEPY_CACHE=" not in concurrency, (
        "what both stages set is no change"
    )
    parallelize = git_in(clone, "diff", "stage-1", "stage-2", "--", "uwsgi.ini", "stage.env")
    for line in ("-TWEEPY_SERVER=dev", "+TWEEPY_SERVER=uwsgi", "+TWEEPY_PROCESSES=4", "+processes = 4"):
        assert f"\n{line}\n" in parallelize, line
    assert "2 app nodes" in git_in(clone, "diff", "stage-6", "stage-7", "--", "nginx.conf")


def test_the_uwsgi_lines_a_branch_shows_are_what_the_runner_adds_for_its_stage():
    for stage in (s for s in stages.all_stages() if s.server == "uwsgi"):
        added, elsewhere, options = [], {}, iter(stage.uwsgi_options(stages.VAR))
        for option in options:
            if option in ("--chdir", "--socket", "--pidfile", "--master-fifo", "--processes"):
                elsewhere[option] = next(options)  # the run's own paths, and the machine's count
            else:
                added.append(option)
        processes = elsewhere["--processes"]
        section = branches.uwsgi_section(stage)
        settings = [line.split("=", 1) for line in section if not line.startswith(";")]
        shown = [
            f"--{name.strip()}" if value.strip() == "true" else f"--{name.strip()} {value.strip()}"
            for name, value in settings
        ]
        assert " ".join(shown) == " ".join([f"--processes {processes}"] * (stage.get("PROCESSES") != "auto") + added)
        if stage.get("PROCESSES") == "auto":
            assert "TWEEPY_PROCESSES=auto" in section[0], "the count is the machine's, not the branch's"


def test_stage_branches_are_made_again_from_a_stage_branch_and_never_half_moved(clone, tmp_path):
    ladder = git_in(clone, "rev-parse", "--abbrev-ref", "HEAD").strip()
    made = stage_tips(clone)
    git_in(clone, "checkout", "-q", "stage-4")
    again = run_branches(clone)
    assert again.returncode == 0, again.stdout + again.stderr
    assert stage_tips(clone) == made, "the same ladder makes the very same commits"

    git_in(clone, "checkout", "-q", ladder)
    uncommitted = clone / "stages" / "4-cache" / "part-mine.env"
    uncommitted.write_text("TWEEPY_CACHE=local\n")
    dirty = run_branches(clone)
    assert dirty.returncode != 0 and "commit it first; no branch moved" in dirty.stderr
    assert stage_tips(clone) == made
    uncommitted.unlink()

    (clone / "NEWS").write_text("a new commit on the ladder\n")
    git_in(clone, "add", "NEWS")
    git_in(clone, "-c", "user.name=Attendee", "-c", "user.email=a@example.com", "commit", "-q", "-m", "News")
    elsewhere = tmp_path / "elsewhere"
    git_in(clone, "worktree", "add", "-q", str(elsewhere), "stage-5")
    refused = run_branches(clone)
    assert refused.returncode != 0
    assert f"stage-5 would move, but it is checked out in {elsewhere}" in refused.stderr
    assert "no branch moved" in refused.stderr
    assert stage_tips(clone) == made, "a refusal leaves every branch where it was"

    git_in(clone, "worktree", "remove", str(elsewhere))
    moved = run_branches(clone)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    head = git_in(clone, "rev-parse", "HEAD").strip()
    for branch in made:
        assert git_in(clone, "rev-parse", f"{branch}^").strip() == head, f"{branch} is on the new commit"


# --- locust's web UI against a running stage --------------------------------------------------


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def load_test_env(tmp_path) -> dict[str, str]:
    """A stage on a SQLite file of the test's own, loaded by locust from loopback as `make run` allows."""
    return {
        "TWEEPY_DATABASE_URL": f"sqlite:///{tmp_path / 'tweepy.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(tmp_path / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        "TWEEPY_UNTHROTTLED_ADDRESSES": stages.LOAD_GENERATOR_ADDRESS,
    }


@pytest.mark.integration
def test_make_locust_drives_the_running_stage_from_its_web_ui(tmp_path):
    """`make run`, then `make locust`: the web UI starts a swarm and the protocol succeeds against the stage."""
    users = 60
    env = load_test_env(tmp_path)
    seed = ["--users", str(users), "--tweets", "600", "--follows", "5"]
    with stages.start(stages.get_stage(4), port=stages.free_port(), var=tmp_path / "var", env=env, seed=seed) as up:
        web = stages.free_port()
        port = up.url.rstrip("/").rsplit(":", 1)[1]
        command = ["make", "-s", "locust", "STAGE=4", f"PORT={port}", f"WEB_PORT={web}", f"SEED_USERS={users}"]
        locust = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            ui = f"http://127.0.0.1:{web}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(ui + "/", timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline and locust.poll() is None, "the web UI never answered"
                    time.sleep(0.5)
            form = urllib.parse.urlencode({"user_count": 5, "spawn_rate": 5, "host": up.url.rstrip("/")}).encode()
            urllib.request.urlopen(urllib.request.Request(ui + "/swarm", data=form), timeout=10).close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                stats = get_json(ui + "/stats/requests")
                total = next(s for s in stats["stats"] if s["name"] == "Aggregated")
                if total["num_requests"] >= 40:
                    break
                time.sleep(1)
            urllib.request.urlopen(urllib.request.Request(ui + "/stop", data=b""), timeout=10).close()
            assert total["num_requests"] >= 40, f"only {total['num_requests']} requests in a minute"
            assert total["num_failures"] == 0, stats.get("errors")
            names = {s["name"] for s in stats["stats"]}
            assert "/ [first login]" in names and "/tweets/" in names
        finally:
            os.killpg(locust.pid, signal.SIGTERM)
            locust.wait(timeout=30)


@pytest.mark.integration
def test_plain_headless_locust_learns_how_many_users_the_stage_holds_and_fails_nothing(tmp_path):
    """`locust -f locustfile.py --headless -H ...` as most locust users type it: no count given."""
    users = 40
    env = load_test_env(tmp_path)
    seed = ["--users", str(users), "--tweets", "400", "--follows", "5"]
    with stages.start(stages.get_stage(2), port=stages.free_port(), var=tmp_path / "var", env=env, seed=seed) as up:
        locust = [str(stages.BIN / "locust"), "-f", "locustfile.py", "--headless", "-u", "8", "-r", "8"]
        locust += ["--run-time", "8s", "--stop-timeout", "5", "-H", up.url.rstrip("/")]
        plain = {k: v for k, v in os.environ.items() if not k.startswith(("TWEEPY_", "LOCUST_"))}
        done = subprocess.run(locust, cwd=ROOT, env=plain, capture_output=True, text=True, timeout=90)
    output = done.stdout + done.stderr
    assert f"holds {users} seeded users" in output, output[-3000:]
    assert "BAR MET" in output and " 0 failures in " in output, output[-3000:]
    assert done.returncode == 0, output[-3000:]


@pytest.mark.integration
def test_plain_headless_locust_says_so_and_stops_when_it_cannot_learn_the_users():
    nobody = f"http://127.0.0.1:{stages.free_port()}"
    locust = [str(stages.BIN / "locust"), "-f", "locustfile.py", "--headless", "-u", "2", "-r", "2"]
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("TWEEPY_", "LOCUST_"))}
    started = time.monotonic()
    done = subprocess.run(
        [*locust, "--run-time", "60s", "-H", nobody], cwd=ROOT, env=plain, capture_output=True, text=True, timeout=90
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert f"cannot tell how many users {nobody} holds" in output and "set TWEEPY_SEED_USERS" in output
    assert "BAR MISSED" in output and "Traceback" not in output, output[-3000:]
    assert time.monotonic() - started < 30, "it stops at once rather than idling for its run time"


# --- the docs: every link and command they give works ---------------------------------------------


def test_make_run_serves_the_single_machine_stage_that_served_the_most_in_the_published_run():
    latest = (ROOT / "results" / "LATEST.md").read_text()
    run = re.search(r"\]\(([^)/]+)/RESULTS\.md\)", latest).group(1)
    report = runs.normalize(json.loads((ROOT / "results" / run / "results.json").read_text()))
    one_machine = [r for r in report["stages"] if not r.get("part") and r["capacity"] and r["nodes"] == 1]
    # The capacity every table shows; a ladder composed of parts compares its stages by their ratios alone.
    composed = bool(report.get("composed"))
    served = {r["stage"]: r["ratio_to_control"] if composed else r["capacity"]["rps"]["median"] for r in one_machine}
    help_text = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    default = int(re.search(r"serve stage N \(default (\d+)\)", help_text).group(1))
    assert default == max(served, key=served.get), f"make run serves stage {default}; {run} measured {served}"


DOCS = [ROOT / "README.md", stages.STAGES / "README.md", *sorted(stages.STAGES.glob("*/README.md"))]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# A command as the docs give it: at the start of a line of a code block, or in backticks.
MAKE = re.compile(r"(?:^|`)make ([a-z]+)((?: [A-Z_]+=[^\s`]+)*)", re.MULTILINE)


def test_every_link_in_the_docs_points_at_a_file_that_exists():
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to {target}, which is missing"


def test_no_doc_repeats_a_heading_the_published_figures_sit_under():
    for doc in DOCS:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.MULTILINE | re.DOTALL)
        headings = re.findall(r"^#+ .+$", prose, re.MULTILINE)
        repeated = {h for h in headings if headings.count(h) > 1}
        assert not repeated, f"{doc.relative_to(ROOT)} repeats {sorted(repeated)}"


def test_every_make_command_in_the_docs_is_a_target_and_names_a_real_stage():
    targets = set(re.findall(r"^([a-z]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    numbers = {stage.number for stage in stages.all_stages()}
    for doc in DOCS:
        for target, arguments in MAKE.findall(doc.read_text()):
            where = f"{doc.relative_to(ROOT)}: make {target}{arguments}"
            assert target in targets, where
            values = dict(argument.split("=", 1) for argument in arguments.split())
            for name in ("STAGE", "A", "B"):
                if name in values:
                    assert int(values[name]) in numbers, where
            if "PART" in values:
                stages.get_stage(int(values["STAGE"]), values["PART"])  # exits on a part that does not exist
            for number in values.get("STAGES", "").strip('"').split():
                assert int(number) in numbers, where


def test_make_explain_shows_a_stages_plans_on_the_database_make_run_serves(tmp_path):
    env = {
        **os.environ,
        "TWEEPY_DATABASE_URL": f"sqlite:///{tmp_path / 'tweepy.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(tmp_path / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
    }
    explain = [str(stages.BIN / "python"), "-m", "tools.stages", "explain"]
    before = subprocess.run([*explain, "2"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert before.returncode == 0, before.stderr
    assert "schema at 0002" in before.stdout and "SCAN tweets" in before.stdout
    after = subprocess.run([*explain, "3"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "schema at 0005" in after.stdout and "USING INDEX ix_tweets_author_id_id" in after.stdout
    assert "SCAN tweets" not in after.stdout


def test_requirements_txt_installs_what_make_run_installs():
    makefile = (ROOT / "Makefile").read_text()
    run_stamp = re.search(r"^\$\(VENV\)/\.installed-run:.*\n(?:\t.*\n)*", makefile, re.MULTILINE).group(0)
    (installed,) = re.findall(r"\$\(call install,([\w-]+)\)", run_stamp)
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"-r requirements/{installed}.txt"]


# --- the real-hosts recipe --------------------------------------------------------------------


def test_the_real_hosts_recipe_never_opens_the_app_servers_socket_to_the_world():
    readme = (ROOT / "docs" / "real-hosts.md").read_text()
    recipe = readme[readme.index("**On real hosts.**") :]
    recipe = " ".join(recipe[: recipe.index("\n\n")].split())
    assert "--uid tweepy --gid tweepy --socket 10.0.0.11:3031" in recipe, "unprivileged, on a private address"
    assert "0.0.0.0:" not in recipe and "never bind it to `0.0.0.0`" in recipe
    assert "tcp dport 3031 ip saddr != 10.0.0.10 drop" in recipe, "a firewall rule: only the front host"
    assert "scram-sha-256" in recipe and "never as the superuser" in recipe
    assert "rediss://" in recipe and "TWEEPY_TRUSTED_PROXIES" in recipe
