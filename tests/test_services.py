"""A test that needs a server which does not answer is skipped on a developer's
machine and fails in CI (``TWEEPY_REQUIRE_SERVICES=1``): see ``services.py``."""

from __future__ import annotations

import pytest
from helpers import services

# Port 1 on loopback: nothing listens there, so connecting is refused at once.
NOWHERE = {
    "POSTGRES_URL": "postgresql+psycopg://postgres@127.0.0.1:1/postgres",
    "REDIS_URL": "redis://127.0.0.1:1/0",
}
HELPERS = {"POSTGRES_URL": services.postgres_url, "REDIS_URL": services.redis_url}


@pytest.fixture(params=sorted(NOWHERE))
def unreachable(request, monkeypatch):
    """One helper, pointed at a server that does not answer."""
    monkeypatch.setattr(services, request.param, NOWHERE[request.param])
    return HELPERS[request.param]


def test_an_unreachable_server_skips_the_test_saying_why(unreachable, monkeypatch):
    monkeypatch.delenv("TWEEPY_REQUIRE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="127.0.0.1:1.* is unreachable.*scripts/services"):
        unreachable()


def test_an_unreachable_server_fails_the_test_when_services_are_required(unreachable, monkeypatch):
    monkeypatch.setenv("TWEEPY_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="TWEEPY_REQUIRE_SERVICES=1"):
        unreachable()


def test_reachable_servers_give_their_urls():
    assert services.postgres_url() == services.POSTGRES_URL
    assert services.redis_url() == services.REDIS_URL
