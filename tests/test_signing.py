"""The session cookie and the CSRF token are Flask's and Flask-WTF's own, made with less work:
the signer is built once, a cookie's signature is checked once while it is kept, and the pages
of one minute share one signed token, which is still exactly the token Flask-WTF would have
made at the minute's first page, and is still bound to its session."""

from __future__ import annotations

import time

import pytest
from flask import g, session
from flask_wtf.csrf import generate_csrf, validate_csrf
from helpers.browser import Browser
from helpers.pages import csrf_token

from tweepy import signing


@pytest.fixture
def clock(monkeypatch):
    """The clock pages and tokens are stamped with, stopped at the start of the next minute (after
    every cookie made so far: a signature from the future is refused); move it with ``clock[0] += 1``."""
    period = signing.TOKEN_PERIOD_S
    now = [float((int(time.time()) // period + 1) * period)]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def test_pages_of_one_minute_carry_the_token_flask_wtf_made_at_its_first_page(app, alice, clock):
    clock[0] += 0.2
    first = csrf_token(alice.get("/tweets/"))
    with app.test_request_context():
        session["csrf_token"] = _session_of(app, alice)["csrf_token"]
        assert generate_csrf() == first
    clock[0] += signing.TOKEN_PERIOD_S - 1
    assert csrf_token(alice.get("/users/")) == first
    assert alice.client.post("/tweets/", data={"tweet": "signed", "csrf_token": first}).status_code == 303


def test_the_next_minute_signs_again_and_both_tokens_are_accepted(app, alice, clock):
    earlier = csrf_token(alice.get("/tweets/"))
    clock[0] += signing.TOKEN_PERIOD_S
    later = csrf_token(alice.get("/tweets/"))
    assert later != earlier
    for token in (earlier, later):
        assert alice.client.post("/tweets/", data={"tweet": "signed", "csrf_token": token}).status_code == 303


def test_a_token_shown_again_late_in_its_minute_still_works_for_59_minutes_more(app, alice, clock):
    token = csrf_token(alice.get("/tweets/"))
    clock[0] += signing.TOKEN_PERIOD_S - 1
    assert csrf_token(alice.get("/tweets/")) == token  # shown again, 59 s after it was signed
    clock[0] += 59 * 60
    assert alice.client.post("/tweets/", data={"tweet": "in time", "csrf_token": token}).status_code == 303
    clock[0] += 2
    assert alice.client.post("/tweets/", data={"tweet": "too late", "csrf_token": token}).status_code == 400


def test_a_minute_keeps_the_tokens_of_so_many_sessions_then_starts_afresh(app, alice, clock, monkeypatch):
    monkeypatch.setattr(signing, "TOKENS_A_PERIOD", 2)
    others = [Browser(app.test_client()) for _ in range(2)]
    for name, other in zip(("bob", "carol"), others, strict=True):
        assert other.register(name).status_code == 303
    tokens = [csrf_token(browser.get("/tweets/")) for browser in (alice, *others)]
    assert len(app.extensions["tweepy_page_tokens"].tokens) <= 2
    assert len(set(tokens)) == 3  # each still its own session's
    for browser, token in zip((alice, *others), tokens, strict=True):
        assert csrf_token(browser.get("/users/")) == token  # signed again at most, in the same second


def test_two_sessions_in_one_minute_get_tokens_of_their_own(app, alice):
    bob = Browser(app.test_client())
    assert bob.register("bob").status_code == 303
    alices, bobs = csrf_token(alice.get("/tweets/")), csrf_token(bob.get("/tweets/"))
    assert alices != bobs
    assert bob.client.post("/tweets/", data={"tweet": "not mine", "csrf_token": alices}).status_code == 400


def test_a_login_replaces_the_token_even_within_the_same_minute(app, alice, clock):
    before = csrf_token(alice.get("/tweets/"))
    alice.logout()
    assert alice.login("alice").status_code == 303
    after = csrf_token(alice.get("/tweets/"))
    assert after != before
    assert alice.client.post("/tweets/", data={"tweet": "old token", "csrf_token": before}).status_code == 400


def test_a_form_rendered_by_flask_wtf_carries_the_pages_token(app):
    with app.test_request_context("/"):
        session["csrf_token"] = "a" * 40
        token = signing.page_token()
        assert g.csrf_token == token == generate_csrf()
        validate_csrf(token)


def test_the_session_signer_is_made_once_and_follows_a_new_secret_key(app):
    sessions = app.session_interface
    assert sessions.get_signing_serializer(app) is sessions.get_signing_serializer(app)
    first = sessions.get_signing_serializer(app)
    app.secret_key = "another key"
    assert sessions.get_signing_serializer(app) is not first


def test_flask_opens_and_saves_each_requests_session_through_the_apps_session_interface(app, client, monkeypatch):
    """signing.SessionInterface does its work only while Flask asks ``app.session_interface`` to open and
    save every request's session, and Flask's cookie sessions sign through ``get_signing_serializer``."""
    sessions, calls = app.session_interface, []
    for name in ("open_session", "save_session", "get_signing_serializer"):
        real = getattr(sessions, name)
        monkeypatch.setattr(sessions, name, lambda *args, real=real, name=name: calls.append(name) or real(*args))
    assert client.get("/").status_code == 200  # the login form puts a CSRF token in a new session
    assert calls[0] == "open_session" and "save_session" in calls
    assert "get_signing_serializer" in calls[calls.index("save_session") :], "the new cookie is signed by ours"
    assert client.get_cookie("session") is not None
    calls.clear()
    assert client.get("/").status_code == 200  # that cookie read back, through the kept signature
    assert calls[0] == "open_session" and "save_session" in calls


def test_a_kept_cookie_still_ends_when_the_session_lifetime_does(app, alice, clock):
    assert alice.get("/tweets/").status_code == 200  # its cookie now checked and kept
    kept = alice.client.get_cookie("session").value
    clock[0] += app.permanent_session_lifetime.total_seconds() - 5
    assert alice.get("/tweets/").status_code == 200
    alice.client.set_cookie("session", kept)  # not the one that request signed again
    clock[0] += 10
    assert alice.get("/tweets/").status_code == 302  # to the login form, as for a cookie never seen


def test_a_cookie_altered_in_one_character_is_refused_after_the_real_one_was_kept(app, alice):
    assert alice.get("/tweets/").status_code == 200
    cookie = alice.client.get_cookie("session").value
    # Not the last character: of its six bits, the signature's base64 uses four (27 characters hold
    # 20 bytes), so "B" in place of an "A" there is the very same signature.
    one_changed = cookie[:-2] + ("A" if cookie[-2] != "A" else "B") + cookie[-1]
    for altered in (one_changed, cookie[1:], cookie + "x"):
        alice.client.set_cookie("session", altered)
        assert alice.get("/tweets/").status_code == 302
    alice.client.set_cookie("session", cookie)
    assert alice.get("/tweets/").status_code == 200


def test_a_cookie_is_kept_under_the_key_that_checked_it_only(app, alice):
    assert alice.get("/tweets/").status_code == 200
    app.secret_key = "another key"
    assert alice.get("/tweets/").status_code == 302


def test_only_cookies_of_plain_values_are_kept(app, browser):
    assert browser.register("alice").status_code == 303  # its cookie holds the welcome, a list
    with_message = browser.client.get_cookie("session").value
    assert "Welcome" in browser.get("/tweets/").get_data(as_text=True)
    without = browser.client.get_cookie("session").value  # the message shown, the list is gone
    assert browser.get("/tweets/").status_code == 200
    kept = app.session_interface.kept[2]
    assert with_message not in kept and without in kept


def _session_of(app, browser) -> dict:
    cookie = browser.client.get_cookie("session").value
    return app.session_interface.get_signing_serializer(app).loads(cookie)
