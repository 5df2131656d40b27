"""Started as root, a stage's servers run as an unprivileged user (made if missing) over files that
user owns, and only nginx's master keeps root; started by anyone else, everything runs as them."""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest
import requests

from tools import stages

pytestmark = pytest.mark.integration

SEED = ["--users", "5", "--tweets", "10", "--follows", "1"]


def user_of(pid: int) -> int:
    """The effective user id of a running process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise AssertionError(f"no Uid line for {pid}")


@pytest.fixture
def folder():
    """A folder of the test's own outside pytest's, which only its owner may enter."""
    made = Path(tempfile.mkdtemp(prefix="tweepy-privileges-"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_started_as_root_uwsgi_and_nginxs_workers_run_as_an_unprivileged_user_over_files_it_owns(folder):
    database = folder / "tweepy.sqlite3"
    env = {
        "TWEEPY_SERVE_AS": "tweepy",
        "TWEEPY_DATABASE_URL": f"sqlite:///{database}",
        "TWEEPY_INSTANCE_PATH": str(folder / "instance"),
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
    }
    with stages.start(stages.get_stage(4), port=stages.free_port(), var=folder / "var", env=env, seed=SEED) as up:
        assert requests.get(up.url, timeout=10).status_code == 200
        assert user_of(up.process("nginx").pid) == os.geteuid(), "nginx's master is whoever started it"
        users = {user_of(pid) for pid in [up.process("uwsgi").pid, *up.workers(), *up.front_workers()]}

    serving = pwd.getpwnam("tweepy").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert users == {serving}
    log = (folder / "var" / "uwsgi.log").read_text()
    assert f"Python version: {platform.python_version()} " in log, "the app runs on the tools' own Python"
    for written in (database, folder / "instance" / "secret_key", folder / "var"):
        assert written.stat().st_uid == serving, written
