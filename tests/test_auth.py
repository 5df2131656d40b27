"""Registering, logging in and out: GET|POST /, GET|POST /register/, POST /logout/."""

from __future__ import annotations

import pytest
from helpers.browser import sign_up
from helpers.pages import csrf_token, errors, text_of
from helpers.stored import PASSWORD, add_users, count, user_row

from tweepy.models import User
from tweepy.passwords import password_matches

UNSAFE_NEXT = ["//evil.com", "//evil.com/tweets/", "http://evil.com", "https://evil.com/", "/\\evil.com", "evil.com"]


def logged_in_user_id(client) -> str | None:
    """The user the session cookie names (it also carries the session id: "id.session")."""
    with client.session_transaction() as session:
        session_id = session.get("_user_id")
    return session_id.partition(".")[0] if session_id else None


def registration(**changes) -> dict:
    fields = {"name": "carol", "email": "carol@example.com", "password": "long enough", "confirm": "long enough"}
    fields.update(changes)
    return fields


def register(browser, **changes):
    return browser.fill("/register/", registration(**changes))


# --- logging in -------------------------------------------------------------


def test_login_page_shows_a_form_for_name_and_password(client):
    response = client.get("/")
    assert response.status_code == 200
    page = text_of(response)
    for field in ('name="name"', 'name="password"', 'name="csrf_token"'):
        assert field in page
    assert '<form method="post" action="/"' in page


def test_logged_in_visitor_of_the_login_page_is_sent_to_the_timeline(alice):
    response = alice.get("/")
    assert response.status_code in (302, 303)
    assert response.headers["Location"] == "/tweets/"


def test_login_redirects_303_to_the_timeline_and_starts_a_session(app, browser):
    (alice_id,) = add_users(app, "alice")
    response = browser.login("alice", PASSWORD)
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"
    assert logged_in_user_id(browser.client) == str(alice_id)
    assert "@alice" in text_of(browser.get("/tweets/"))


@pytest.mark.parametrize(
    ("name", "password"),
    [("alice", "wrong password"), ("nobody", PASSWORD), ("alice", ""), ("alice", "x" * 100)],
    ids=["wrong password", "unknown name", "no password", "overlong password"],
)
def test_wrong_login_is_refused_with_4xx_an_error_and_no_session(app, browser, name, password):
    add_users(app, "alice")
    response = browser.login(name, password)
    assert 400 <= response.status_code < 500
    assert logged_in_user_id(browser.client) is None
    assert browser.get("/tweets/").status_code == 302


def test_wrong_password_is_a_401_saying_so(app, browser):
    add_users(app, "alice")
    response = browser.login("alice", "wrong password")
    assert response.status_code == 401
    assert "Wrong name or password." in errors(response)


def test_login_without_csrf_token_is_400_and_starts_no_session(app, client):
    add_users(app, "alice")
    client.get("/")
    response = client.post("/", data={"name": "alice", "password": PASSWORD})
    assert response.status_code == 400
    assert logged_in_user_id(client) is None


def test_login_goes_back_to_the_page_that_asked_for_it(app, client):
    add_users(app, "alice")
    asked = client.get("/users/")
    assert asked.headers["Location"] == "/?next=%2Fusers%2F"
    page = client.get(asked.headers["Location"])
    assert 'name="next" type="hidden" value="/users/"' in text_of(page)
    response = client.post(
        "/", data={"name": "alice", "password": PASSWORD, "next": "/users/", "csrf_token": csrf_token(page)}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/"


@pytest.mark.parametrize("unsafe", UNSAFE_NEXT)
def test_login_never_redirects_off_the_site(app, client, unsafe):
    add_users(app, "alice")
    token = csrf_token(client.get("/"))
    response = client.post("/", data={"name": "alice", "password": PASSWORD, "next": unsafe, "csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"


# --- logging out ------------------------------------------------------------


def test_logout_redirects_to_the_login_page_and_ends_the_session(alice):
    response = alice.logout()
    assert response.status_code == 303
    assert response.headers["Location"] == "/"
    assert logged_in_user_id(alice.client) is None
    assert alice.get("/tweets/").status_code == 302


def test_logout_without_csrf_token_is_400_and_keeps_the_session(alice):
    response = alice.client.post("/logout/")
    assert response.status_code == 400
    assert logged_in_user_id(alice.client) is not None
    assert alice.get("/tweets/").status_code == 200


# --- registering ------------------------------------------------------------


def test_register_page_shows_a_form_for_name_email_password_and_confirmation(client):
    response = client.get("/register/")
    assert response.status_code == 200
    page = text_of(response)
    for field in ("name", "email", "password", "confirm", "csrf_token"):
        assert f'name="{field}"' in page


def test_registering_stores_the_user_with_a_bcrypt_hash_and_logs_them_in(app, browser):
    response = register(browser, email="Carol@Example.com")
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"
    carol = user_row(app, "carol")
    assert carol.email == "carol@example.com"
    assert carol.password_hash.startswith("$2b$") and "long enough" not in carol.password_hash
    with app.app_context():
        assert password_matches(carol.password_hash, "long enough")
        assert not password_matches(carol.password_hash, "long enougH")
    assert logged_in_user_id(browser.client) == str(carol.id)
    assert "Welcome to tweepy, carol!" in text_of(browser.get("/tweets/"))


def test_a_registered_user_can_log_in_again_later(app, browser):
    register(browser)
    browser.logout()
    response = browser.login("carol", "long enough")
    assert response.status_code == 303
    assert logged_in_user_id(browser.client) == str(user_row(app, "carol").id)


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "abc"},
        {"name": "A" * 32},
        {"name": "under_score_09"},
        {"password": "12345678", "confirm": "12345678"},
        {"password": "x" * 72, "confirm": "x" * 72},
        {"password": "é" * 36, "confirm": "é" * 36},  # 72 bytes
    ],
    ids=[
        "3-char name",
        "32-char name",
        "underscore and digits",
        "8-char password",
        "72-byte password",
        "72 bytes of é",
    ],
)
def test_register_accepts_input_at_the_limits(app, browser, changes):
    response = register(browser, **changes)
    assert response.status_code == 303, errors(response)
    assert count(app, User) == 1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"name": "ab"}, "3 to 32 letters, digits or underscores."),
        ({"name": "a" * 33}, "3 to 32 letters, digits or underscores."),
        ({"name": "two words"}, "3 to 32 letters, digits or underscores."),
        ({"name": "dash-ed"}, "3 to 32 letters, digits or underscores."),
        ({"name": "élodie"}, "3 to 32 letters, digits or underscores."),
        ({"name": "<script>"}, "3 to 32 letters, digits or underscores."),
        ({"name": ""}, "This field is required."),
        ({"email": "not an email"}, "That is not an email address."),
        ({"email": ""}, "This field is required."),
        ({"password": "seven77", "confirm": "seven77"}, "At least 8 characters."),
        ({"password": "x" * 73, "confirm": "x" * 73}, "At most 72 bytes (bcrypt ignores the rest)."),
        ({"password": "é" * 37, "confirm": "é" * 37}, "At most 72 bytes (bcrypt ignores the rest)."),
        ({"confirm": "long enougH"}, "The passwords differ."),
    ],
    ids=[
        "name too short",
        "name too long",
        "name with a space",
        "name with a dash",
        "name with a non-ASCII letter",
        "name with markup",
        "no name",
        "invalid email",
        "no email",
        "password of 7 characters",
        "password of 73 bytes",
        "password of 37 characters but 74 bytes",
        "confirmation differs",
    ],
)
def test_invalid_registration_is_400_with_the_reason_and_stores_nothing(app, browser, changes, reason):
    response = register(browser, **changes)
    assert response.status_code == 400
    assert reason in errors(response)
    assert count(app, User) == 0
    assert logged_in_user_id(browser.client) is None


@pytest.mark.parametrize("taken", ["alice", "ALICE", "Alice"])
def test_register_refuses_a_taken_name_whatever_its_case(app, browser, taken):
    add_users(app, "alice")
    response = register(browser, name=taken)
    assert response.status_code == 400
    assert "That name is taken." in errors(response)
    assert count(app, User) == 1


@pytest.mark.parametrize("taken", ["alice@example.com", "ALICE@Example.COM"])
def test_register_refuses_a_taken_email(app, browser, taken):
    add_users(app, "alice")
    response = register(browser, email=taken)
    assert response.status_code == 400
    assert "That email is already registered." in errors(response)
    assert count(app, User) == 1


@pytest.mark.parametrize(("changes", "field"), [({"name": "Alice"}, "name"), ({"email": "alice@example.com"}, "email")])
def test_name_or_email_taken_between_check_and_insert_is_a_form_error_not_a_500(
    app, browser, monkeypatch, changes, field
):
    # Another request registers the same name after this one's form checks passed:
    # the unique indexes refuse the row and the form says so.
    from tweepy.forms import RegisterForm

    monkeypatch.setattr(RegisterForm, "validate_name", lambda form, f: None)
    monkeypatch.setattr(RegisterForm, "validate_email", lambda form, f: None)
    add_users(app, "alice")
    response = register(browser, **changes)
    assert response.status_code == 400
    assert f"That {field} was just taken." in errors(response)
    assert count(app, User) == 1


def test_register_without_csrf_token_is_400_and_stores_nothing(app, client):
    client.get("/register/")
    response = client.post("/register/", data=registration())
    assert response.status_code == 400
    assert count(app, User) == 0


def test_logged_in_visitor_of_the_register_page_is_sent_to_the_timeline(alice):
    response = alice.get("/register/")
    assert response.headers["Location"] == "/tweets/"


def test_two_people_register_and_each_is_logged_in_as_themselves(app):
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert "@alice" in text_of(alice.get("/tweets/"))
    assert "@bob" in text_of(bob.get("/tweets/"))
    assert count(app, User) == 2
