"""Fixtures: every test gets its own app on a temporary SQLite file (not :memory:,
so WAL behaves as in production), migrated with Alembic, with a low bcrypt cost.

Helpers the tests share live in ``helpers/``. In CI (``CI=true``) a skipped
test fails the run: what CI cannot check, it must not pass over in silence.
"""

from __future__ import annotations

import os

import pytest
from flask_migrate import upgrade
from helpers.browser import Browser
from helpers.stored import FAST_BCRYPT

from tweepy import create_app

# The stages the tests start live in pytest's folders, which only their owner may enter (and which
# pytest, run again meanwhile, closes again): their servers run as whoever runs the tests, root
# included. test_privileges.py starts one as an unprivileged user, in a folder of its own.
os.environ.setdefault("TWEEPY_SERVE_AS", "root")


@pytest.fixture
def make_app(tmp_path):
    """Build an app with extra settings; the schema comes from the migrations."""

    def build(**overrides):
        settings = {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'tweepy.sqlite3'}",
            "INSTANCE_PATH": str(tmp_path / "instance"),
            "SECRET_KEY": "test-secret",
            "BCRYPT_LOG_ROUNDS": FAST_BCRYPT,
            "TESTING": True,
        }
        settings.update(overrides)
        app = create_app(settings)
        with app.app_context():
            upgrade()
        return app

    return build


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def browser(client):
    return Browser(client)


@pytest.fixture
def alice(app, browser):
    """A browser logged in as a freshly registered user, alice."""
    assert browser.register("alice").status_code == 303
    return browser


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if os.environ.get("CI") == "true" and skipped and exitstatus == 0:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; in CI a skip is a failure", red=True)
        session.exitstatus = 1


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of the test's own, which it may stop and start again."""
    from helpers.caches import OwnRedis

    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.close()
