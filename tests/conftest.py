"""Fixtures: every test gets its own app on a temporary SQLite file (not :memory:,
so WAL behaves as in production), migrated with Alembic, with a low bcrypt cost."""

from __future__ import annotations

import re

import pytest
from flask_migrate import upgrade

from tweepy import create_app

FAST_BCRYPT = 4


@pytest.fixture
def make_app(tmp_path):
    """Build an app with extra settings; the schema comes from the migrations."""

    def build(**overrides):
        settings = {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'tweepy.sqlite3'}",
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


def csrf_token(response) -> str:
    match = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', response.get_data(as_text=True))
    assert match, "the page has no CSRF token"
    return match.group(1)


class Browser:
    """A test client that fills forms like a browser: it takes the CSRF token from a page first."""

    def __init__(self, client):
        self.client = client

    def get(self, url, **kwargs):
        return self.client.get(url, **kwargs)

    def post(self, url, data=None, page=None):
        """POST ``data`` with the token of ``page`` (default: the page at ``url``, else the timeline)."""
        token = csrf_token(self.client.get(page or "/tweets/"))
        return self.client.post(url, data={**(data or {}), "csrf_token": token})

    def register(self, name, password="correct horse", email=None):
        token = csrf_token(self.client.get("/register/"))
        return self.client.post(
            "/register/",
            data={
                "name": name,
                "email": email or f"{name}@example.com",
                "password": password,
                "confirm": password,
                "csrf_token": token,
            },
        )

    def login(self, name, password="correct horse"):
        token = csrf_token(self.client.get("/"))
        return self.client.post("/", data={"name": name, "password": password, "csrf_token": token})

    def logout(self):
        return self.post("/logout/")


@pytest.fixture
def browser(client):
    return Browser(client)


@pytest.fixture
def alice(app, browser):
    """A browser logged in as a freshly registered user, alice."""
    assert browser.register("alice").status_code == 303
    return browser
