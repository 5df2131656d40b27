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

import pytest

from tools import compare, stages

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


def test_each_stage_branch_differs_from_its_commit_only_by_the_stage_make_run_serves(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    made = subprocess.run([str(ROOT / "stages" / "branches")], cwd=clone, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    for stage in stages.all_stages():
        branch = f"stage-{stage.number}"
        changed = subprocess.run(
            ["git", "diff", "--name-only", "HEAD", branch], cwd=clone, capture_output=True, text=True, check=True
        ).stdout.split()
        assert changed == ["stages/CURRENT"], f"{branch} carries {changed}"
        current = subprocess.run(
            ["git", "show", f"{branch}:stages/CURRENT"], cwd=clone, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert current == str(stage.number)
    subprocess.run(["git", "checkout", "-q", "stage-4"], cwd=clone, check=True)
    dry = subprocess.run(["make", "-n", "run"], cwd=clone, capture_output=True, text=True)
    assert "tools.stages run 4" in dry.stdout, dry.stdout + dry.stderr


# --- locust's web UI against a running stage --------------------------------------------------


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.integration
def test_make_locust_drives_the_running_stage_from_its_web_ui(tmp_path):
    """`make run`, then `make locust`: the web UI starts a swarm and the protocol succeeds against the stage."""
    users = 60
    env = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{tmp_path / 'tweepy.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(tmp_path / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
        "TWEEPY_UNTHROTTLED_ADDRESSES": stages.LOAD_GENERATOR_ADDRESS,
    }
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


# --- the docs: every link and command they give works ---------------------------------------------


def test_make_run_serves_the_single_machine_stage_that_served_the_most_in_the_published_run():
    latest = (ROOT / "results" / "LATEST.md").read_text()
    run = re.search(r"\]\(([^)/]+)/RESULTS\.md\)", latest).group(1)
    report = json.loads((ROOT / "results" / run / "results.json").read_text())
    one_machine = [r for r in report["stages"] if not r.get("part") and r["best"] and r["nodes"] == 1]
    served = {r["stage"]: r["best"]["rps"] for r in one_machine}
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
    assert "schema at 0004" in after.stdout and "USING INDEX ix_tweets_author_id_id" in after.stdout
    assert "SCAN tweets" not in after.stdout


def test_requirements_txt_installs_what_make_run_installs():
    makefile = (ROOT / "Makefile").read_text()
    run_stamp = re.search(r"^\$\(VENV\)/\.installed-run:.*\n(?:\t.*\n)*", makefile, re.MULTILINE).group(0)
    (installed,) = re.findall(r"\$\(call install,([\w-]+)\)", run_stamp)
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"-r requirements/{installed}.txt"]


# --- the real-hosts recipe --------------------------------------------------------------------


def test_the_real_hosts_recipe_never_opens_the_app_servers_socket_to_the_world():
    readme = (ROOT / "stages" / "7-scale-out" / "README.md").read_text()
    recipe = readme[readme.index("**On real hosts.**") :]
    recipe = " ".join(recipe[: recipe.index("\n\n")].split())
    assert "--uid tweepy --gid tweepy --socket 10.0.0.11:3031" in recipe, "unprivileged, on a private address"
    assert "0.0.0.0:" not in recipe and "never bind it to `0.0.0.0`" in recipe
    assert "tcp dport 3031 ip saddr != 10.0.0.10 drop" in recipe, "a firewall rule: only the front host"
    assert "scram-sha-256" in recipe and "never as the superuser" in recipe
    assert "rediss://" in recipe and "TWEEPY_TRUSTED_PROXIES" in recipe
