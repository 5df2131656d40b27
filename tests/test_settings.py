"""Settings: one declaration each, one documented list, and stages that only set what exists."""

from __future__ import annotations

import re
import subprocess

import pytest

from tools import settings, stages
from tweepy import config

MENTION = re.compile(r"\bTWEEPY_[A-Z0-9_]*[A-Z0-9]\b")
# Files whose TWEEPY_* mentions must all be declared settings.
TRACKED = [
    path
    for path in subprocess.run(["git", "ls-files"], cwd=settings.ROOT, capture_output=True, text=True).stdout.split()
    if not path.startswith("results/")
]


def mentions() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in TRACKED:
        file = settings.ROOT / path
        if not file.is_file():
            continue
        for name in MENTION.findall(file.read_text(errors="replace")):
            found.setdefault(name, set()).add(path)
    return found


def test_every_tweepy_variable_the_project_mentions_is_declared_once():
    declared = settings.every_setting()  # refuses a variable declared twice
    undeclared = {name: sorted(paths) for name, paths in mentions().items() if name not in declared}
    assert undeclared == {}


def test_a_variable_declared_in_two_groups_is_refused(monkeypatch):
    monkeypatch.setattr(settings, "DECLARED_IN", (*settings.DECLARED_IN, ("Again", "tweepy.config", "SETTINGS")))
    with pytest.raises(ValueError, match="TWEEPY_DATABASE_URL is declared twice"):
        settings.every_setting()


def test_every_group_declares_its_settings_with_the_one_setting_type():
    for heading, _, group in settings.groups():
        assert group and all(type(setting) is config.Setting for setting in group), heading


def test_a_setting_is_read_as_its_default_is_typed_and_checked_against_its_minimum():
    steps = config.Setting("TWEEPY_BENCH_WINDOW", 2.0, "", minimum=1)
    assert steps.read({}) == 2.0 and steps.read({"TWEEPY_BENCH_WINDOW": "3"}) == 3.0
    with pytest.raises(ValueError, match="must be at least 1"):
        steps.read({"TWEEPY_BENCH_WINDOW": "0.5"})
    with pytest.raises(ValueError, match="is not a number"):
        steps.read({"TWEEPY_BENCH_WINDOW": "many"})
    assert config.Setting("SQLITE_TUNED", False, "").read({"TWEEPY_SQLITE_TUNED": "on"}) is True


def test_the_readme_lists_every_setting_as_declared():
    assert settings.readme_block(settings.README.read_text()) == settings.table(), (
        "run `python -m tools.settings --write`"
    )


EVERY_STAGE_AND_PART = [each for stage in stages.all_stages() for each in (*stage.parts(), stage)]


@pytest.mark.parametrize("stage", EVERY_STAGE_AND_PART, ids=lambda s: s.slug)
def test_a_stage_only_sets_settings_that_exist(stage):
    assert set(stage.settings) <= settings.all_names()


@pytest.mark.parametrize("stage", EVERY_STAGE_AND_PART, ids=lambda s: s.slug)
def test_a_stage_gives_the_app_only_app_settings_and_the_runner_the_rest(stage):
    app_names = {f"TWEEPY_{s.name}" for s in config.SETTINGS}
    assert set(stage.app_settings) <= app_names
    env = stages.stage_env(stage, port=5000)
    serving_only = {f"TWEEPY_{s.name}" for s in stages.SERVING_SETTINGS} - {"TWEEPY_HOST", "TWEEPY_PORT"}
    assert not serving_only & set(env), "serving settings are the runner's, not the app's"


def test_a_gevent_stage_gets_gevent_from_the_runner_and_a_plain_stage_does_not():
    gevent = next(s for s in stages.all_stages() if int(s.get("GEVENT")))
    plain = next(s for s in stages.all_stages() if s.server == "uwsgi" and not int(s.get("GEVENT")))
    options = gevent.uwsgi_options(stages.VAR)
    assert options[options.index("--gevent") + 1] == gevent.get("GEVENT")
    assert "--gevent-early-monkey-patch" in options
    assert "--gevent" not in plain.uwsgi_options(stages.VAR)


def test_the_logged_settings_show_no_secret_and_no_database_password():
    effective = {s.name: s.default for s in config.SETTINGS}
    effective.update(SECRET_KEY="s3cret", DATABASE_URL="postgresql+psycopg://tweepy:hunter2@db.example/tweepy")
    shown = config.shown(effective)
    assert "SECRET_KEY" not in shown
    assert "hunter2" not in str(shown) and "db.example" in shown["DATABASE_URL"]


def test_a_password_in_a_urls_query_is_never_logged_either():
    effective = {s.name: s.default for s in config.SETTINGS}
    effective.update(
        DATABASE_URL="postgresql+psycopg://tweepy@db.example/tweepy?sslmode=require&password=hunter2",
        CACHE_URL="rediss://cache.example:6380/0?PASSWORD=hunter3",
    )
    shown = config.shown(effective)
    assert "hunter2" not in str(shown) and "hunter3" not in str(shown)
    assert "sslmode=require" in shown["DATABASE_URL"] and "cache.example:6380" in shown["CACHE_URL"]


def test_merging_cached_pages_without_a_cache_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs a TWEEPY_CACHE"):
        config.load(str(tmp_path), {"TIMELINE_FROM_CACHED_PAGES": True, "CACHE": "none", "SECRET_KEY": "x"})


def test_newcomers_threads_without_hashing_threads_and_lanes_are_refused(tmp_path):
    lanes_only = {"NEWCOMERS_NICE": 9, "HASH_KNOWN_DEVICES_FIRST": True, "SECRET_KEY": "x"}
    with pytest.raises(ValueError, match="needs TWEEPY_BCRYPT_IN_THREADPOOL and TWEEPY_HASH_KNOWN_DEVICES_FIRST"):
        config.load(str(tmp_path), lanes_only)
    with pytest.raises(ValueError, match="needs TWEEPY_BCRYPT_IN_THREADPOOL and TWEEPY_HASH_KNOWN_DEVICES_FIRST"):
        config.load(str(tmp_path), {**lanes_only, "HASH_KNOWN_DEVICES_FIRST": False, "BCRYPT_IN_THREADPOOL": True})
    assert config.load(str(tmp_path), {**lanes_only, "BCRYPT_IN_THREADPOOL": True})["NEWCOMERS_NICE"] == 9


def test_the_secret_key_file_is_owner_only_from_the_start(tmp_path):
    config.load(str(tmp_path / "instance"), {})
    assert (tmp_path / "instance" / "secret_key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "instance").stat().st_mode & 0o077 == 0


def test_auto_processes_are_one_per_core_or_with_hashing_threads_one_per_hashing_slots_cores(monkeypatch):
    monkeypatch.setattr(stages.model.os, "sched_getaffinity", lambda _pid: set(range(8)))
    plain = stages.Stage(9, "x", stages.STAGES, {"TWEEPY_SERVER": "uwsgi", "TWEEPY_PROCESSES": "auto"})
    assert plain.processes == 8
    gevent = {**plain.settings, "TWEEPY_GEVENT": "100", "TWEEPY_BCRYPT_IN_THREADPOOL": "true"}
    assert stages.Stage(9, "x", stages.STAGES, {**gevent, "TWEEPY_HASHING_SLOTS": "2"}).processes == 4
    assert stages.Stage(9, "x", stages.STAGES, {**gevent, "TWEEPY_HASHING_SLOTS": "16"}).processes == 1
    assert stages.Stage(9, "x", stages.STAGES, {**plain.settings, "TWEEPY_PROCESSES": "3"}).processes == 3


def test_a_part_of_a_step_is_the_step_before_plus_some_of_the_steps_own_settings():
    for stage in stages.all_stages():
        before = stages.get_stage(stage.number - 1).settings if stage.number else {}
        for part in stage.parts():
            added = {k: v for k, v in part.settings.items() if before.get(k) != v}
            assert added, f"{part.label} changes nothing"
            assert added.items() <= stage.settings.items(), f"{part.label} sets what its step does not"
            assert part.settings != stage.settings, f"{part.label} is the whole step"
            assert stages.get_stage(stage.number, part.part).label == part.label


def test_each_part_of_a_step_adds_to_the_one_before_so_each_row_measures_one_change():
    for stage in (s for s in stages.all_stages() if s.parts()):
        before = stages.get_stage(stage.number - 1).settings
        chain = [before, *(part.settings for part in stage.parts()), stage.settings]
        for earlier, later in zip(chain, chain[1:], strict=False):
            changed = {k: v for k, v in earlier.items() if before.get(k) != v}
            assert changed.items() <= later.items(), f"stage {stage.number}: a part undoes what the one before set"
            assert earlier != later, f"stage {stage.number}: a part changes nothing over the one before"


def test_the_steps_that_change_several_things_measure_them_apart():
    def added(stage, over):
        return {k for k, v in stage.settings.items() if over.settings.get(k) != v}

    cache, concurrency = stages.get_stage(4), stages.get_stage(5)
    reads, timelines = stages.get_stage(4, "reads"), stages.get_stage(4, "timelines")
    assert added(reads, stages.get_stage(3)) == {"TWEEPY_CACHE"}
    assert added(timelines, reads) == {"TWEEPY_TIMELINE_FROM_CACHED_PAGES"}
    assert added(cache, timelines) == {"TWEEPY_FRAGMENT_CACHE"}
    gevent = stages.get_stage(5, "gevent")
    assert "TWEEPY_GEVENT" in added(gevent, cache) and "TWEEPY_BCRYPT_LIBRARY" not in gevent.settings
    assert added(concurrency, gevent) == {"TWEEPY_BCRYPT_LIBRARY"}, "the system's bcrypt is measured on its own"
