"""What the app promises a stranger cannot do: guess passwords without limit, keep a
session alive after log out, reuse a CSRF token across sessions, frame the pages,
grow a worker's memory with names and page numbers of their choosing."""

from __future__ import annotations

import re
import sqlite3
import time

import pytest
from helpers.browser import Browser, sign_up
from helpers.pages import csrf_token, errors, text_of
from helpers.stored import PASSWORD, add_tweets, add_users, count, count_attempts

from tweepy import passwords, queries
from tweepy.models import Follow, ThrottleEvent, Tweet, User

ATTACKER = "203.0.113.9"


def from_address(app, address: str) -> Browser:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return Browser(client)


@pytest.fixture
def hashes(monkeypatch):
    """Counts every bcrypt check the app makes."""
    made = []
    real = passwords.bcrypt.check_password_hash

    def counted(*args):
        made.append(args)
        return real(*args)

    monkeypatch.setattr(passwords.bcrypt, "check_password_hash", counted)
    return made


# --- failed logins ------------------------------------------------------------


def test_an_account_is_closed_to_logins_from_an_address_after_ten_failures_from_it_even_with_the_right_password(
    app, hashes
):
    add_users(app, "alice")
    guesser = from_address(app, ATTACKER)
    for _ in range(10):
        assert guesser.login("alice", "wrong guess").status_code == 401
    hashed = len(hashes)
    refused = guesser.login("alice", PASSWORD)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert "Too many failed logins for this account from here." in errors(refused)[0]
    assert len(hashes) == hashed, "a refused login costs no hash"


def test_the_account_wide_limit_holds_whatever_address_the_guesses_come_from(make_app):
    app = make_app(LOGIN_FAILURES_PER_ACCOUNT=10)
    add_users(app, "alice")
    for i in range(10):
        from_address(app, f"198.51.100.{i}").login("alice", "wrong guess")
    assert from_address(app, "198.51.100.99").login("alice", PASSWORD).status_code == 429


def test_successful_logins_never_count(app):
    add_users(app, "alice")
    for _ in range(15):
        browser = from_address(app, ATTACKER)
        assert browser.login("alice", PASSWORD).status_code == 303
    assert count_attempts(app) == 0


def test_one_address_guessing_many_accounts_is_refused_after_its_own_limit(make_app):
    app = make_app(LOGIN_FAILURES_PER_ADDRESS=5)
    names = add_users(app, "alice", "bob", "carol", "dave", "erin", "frank")
    assert len(names) == 6
    guesser = from_address(app, ATTACKER)
    for name in ("alice", "bob", "carol", "dave", "erin"):
        assert guesser.login(name, "wrong guess").status_code == 401
    assert guesser.login("frank", PASSWORD).status_code == 429
    assert from_address(app, "198.51.100.1").login("frank", PASSWORD).status_code == 303


def test_failures_older_than_the_window_no_longer_count(make_app):
    app = make_app(LOGIN_FAILURE_WINDOW_S=0)
    add_users(app, "alice")
    guesser = from_address(app, ATTACKER)
    for _ in range(12):
        assert guesser.login("alice", "wrong guess").status_code == 401


def test_an_unthrottled_address_is_never_counted_nor_refused_by_address(make_app):
    app = make_app(UNTHROTTLED_ADDRESSES="127.0.0.1, 192.0.2.7", REGISTRATIONS_PER_ADDRESS=2)
    for i in range(4):
        assert from_address(app, "192.0.2.7").register(f"load_{i}").status_code == 303
    assert count_attempts(app) == 0


def test_names_that_cannot_exist_never_log_in_as_their_ascii_look_alike(app):
    add_users(app, "kelvin")
    # U+212A KELVIN SIGN lower-cases to an ASCII "k".
    assert from_address(app, ATTACKER).login("\u212aelvin", PASSWORD).status_code == 401


# --- registrations ----------------------------------------------------------------


def test_one_address_may_register_only_so_many_accounts_an_hour(make_app):
    app = make_app(REGISTRATIONS_PER_ADDRESS=3)
    for i in range(3):
        assert from_address(app, ATTACKER).register(f"sock_{i}").status_code == 303
    refused = from_address(app, ATTACKER).register("sock_3")
    assert refused.status_code == 429
    assert "Too many new accounts from your address." in errors(refused)[0]
    assert count(app, User) == 3
    assert from_address(app, "198.51.100.1").register("someone").status_code == 303


# --- sessions -----------------------------------------------------------------------


def test_a_session_cookie_copied_before_log_out_is_dead_after_it(app, alice):
    stolen = alice.client.get_cookie("session").value
    assert alice.logout().status_code == 303
    thief = app.test_client()
    thief.set_cookie("session", stolen)
    response = thief.get("/tweets/")
    assert response.status_code == 302 and response.headers["Location"].startswith("/?next=")


def test_logging_out_ends_this_devices_session_only(app):
    add_users(app, "alice")
    laptop, phone = Browser(app.test_client()), Browser(app.test_client())
    assert laptop.login("alice", PASSWORD).status_code == 303
    assert phone.login("alice", PASSWORD).status_code == 303
    stolen = laptop.client.get_cookie("session").value
    assert laptop.logout().status_code == 303
    assert laptop.get("/tweets/").status_code == 302
    assert phone.get("/tweets/").status_code == 200
    thief = app.test_client()
    thief.set_cookie("session", stolen)
    assert thief.get("/tweets/").status_code == 302


def test_logging_out_everywhere_ends_every_session_of_the_user_and_no_one_elses(app):
    add_users(app, "alice", "bob")
    laptop, phone, bobs = (Browser(app.test_client()) for _ in range(3))
    for browser, name in ((laptop, "alice"), (phone, "alice"), (bobs, "bob")):
        assert browser.login(name, PASSWORD).status_code == 303
    stolen = phone.client.get_cookie("session").value
    assert "Log out everywhere" in text_of(laptop.get("/tweets/"))
    assert laptop.post("/logout/everywhere").status_code == 303
    assert laptop.get("/tweets/").status_code == 302
    assert phone.get("/tweets/").status_code == 302
    thief = app.test_client()
    thief.set_cookie("session", stolen)
    assert thief.get("/tweets/").status_code == 302
    assert bobs.get("/tweets/").status_code == 200
    assert phone.login("alice", PASSWORD).status_code == 303
    assert phone.get("/tweets/").status_code == 200


DAY = 24 * 3600


@pytest.fixture
def clock(monkeypatch):
    """The clock sessions are stamped with, a second ahead of every cookie made so far; move it with
    ``clock[0] += seconds``."""
    now = [time.time() + 1]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def test_a_session_ends_after_the_idle_time_without_a_request(make_app, clock):
    app = make_app(SESSION_IDLE_S=2 * DAY, SESSION_LIFETIME_S=14 * DAY)
    alice = sign_up(app, "alice")
    for _ in range(3):  # used every day and a half, it lives on
        clock[0] += 1.5 * DAY
        assert alice.get("/tweets/").status_code == 200
    clock[0] += 2 * DAY + 60
    assert alice.get("/tweets/").status_code == 302


def test_a_session_ends_at_its_lifetime_however_much_it_is_used(make_app, clock):
    app = make_app(SESSION_IDLE_S=2 * DAY, SESSION_LIFETIME_S=14 * DAY)
    alice = sign_up(app, "alice")
    for _ in range(13):
        clock[0] += DAY
        assert alice.get("/tweets/").status_code == 200
    clock[0] += DAY + 60
    assert alice.get("/tweets/").status_code == 302


def test_activity_signs_the_cookie_again_now_and_then_and_writes_nothing(make_app, clock):
    app = make_app(SESSION_IDLE_S=2 * DAY)
    alice = sign_up(app, "alice")
    assert alice.get("/tweets/").status_code == 200  # showing the welcome, which leaves the session
    sessions = count(app, ThrottleEvent)

    def signs_again() -> bool:
        return any(h.startswith("session=") for h in alice.get("/tweets/").headers.getlist("Set-Cookie"))

    clock[0] += 60
    assert not signs_again(), "a request a minute after the last signature changes nothing"
    clock[0] += 2 * DAY / 24
    assert signs_again(), "one past a 24th of the idle time signs the cookie again"
    assert not signs_again()
    assert count(app, ThrottleEvent) == sessions


def test_the_csrf_token_changes_at_log_in_and_log_out(app, client):
    add_users(app, "alice")
    before = csrf_token(client.get("/"))
    client.post("/", data={"name": "alice", "password": PASSWORD, "csrf_token": before})
    during = csrf_token(client.get("/tweets/"))
    assert client.post("/tweets/", data={"tweet": "old token", "csrf_token": before}).status_code == 400
    assert client.post("/tweets/", data={"tweet": "new token", "csrf_token": during}).status_code == 303
    client.post("/logout/", data={"csrf_token": during})
    after = csrf_token(client.get("/"))
    assert len({before, during, after}) == 3


@pytest.mark.parametrize(
    "path, form",
    [("/tweets/", {"tweet": "forged"}), ("/users/bob/follow", {"next": "/users/"}), ("/logout/", {})],
    ids=["tweet", "follow", "log out"],
)
def test_a_form_without_a_token_field_of_its_own_is_still_refused_without_the_pages_token(app, path, form):
    alice, _bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert alice.client.post(path, data=form).status_code == 400
    assert alice.client.post(path, data={**form, "csrf_token": "forged"}).status_code == 400
    assert count(app, Tweet) == 0 and count(app, Follow) == 0
    assert alice.get("/tweets/").status_code == 200, "still logged in"


def test_the_session_cookie_is_http_only_and_same_site_lax(app, alice):
    cookie = alice.client.get_cookie("session")
    assert cookie.http_only and cookie.same_site == "Lax" and not cookie.secure


def test_the_session_cookie_is_https_only_when_asked(make_app):
    browser = Browser(make_app(SECURE_COOKIES=True).test_client())
    response = browser.register("alice")
    assert "Secure" in response.headers["Set-Cookie"]


FRONT = "10.0.0.2"  # a TLS front, as nginx sees it


def through_a_front(app, client_address: str, scheme: str = "https") -> Browser:
    """A browser at ``client_address``, whose requests reach nginx through a front that says so (and,
    over https, the Referer a browser sends to its own site, which Flask-WTF then checks)."""
    client = app.test_client()
    client.environ_base.update(
        REMOTE_ADDR=FRONT,
        HTTP_X_FORWARDED_FOR=client_address,
        HTTP_X_FORWARDED_PROTO=scheme,
        HTTP_REFERER=f"{scheme}://localhost/",
    )
    return Browser(client)


def test_behind_a_trusted_tls_front_the_clients_address_and_https_are_believed(make_app):
    app = make_app(TRUSTED_PROXIES=1, SECURE_COOKIES=True, LOGIN_FAILURES_PER_ADDRESS=2)
    add_users(app, "alice", "bob", "carol")
    guesser = through_a_front(app, ATTACKER)
    for name in ("alice", "bob"):
        failed = guesser.login(name, "wrong guess")
        assert failed.status_code == 401
        assert failed.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert guesser.login("carol", PASSWORD).status_code == 429, "the guesser's own address reached its limit"

    logged_in = through_a_front(app, "198.51.100.7").login("carol", PASSWORD)
    assert logged_in.status_code == 303, "another address behind the same front is not refused"
    cookies = logged_in.headers.getlist("Set-Cookie")
    for name in ("__Host-session=", "__Host-tweepy_device="):
        (cookie,) = [c for c in cookies if c.startswith(name)]
        assert "Secure" in cookie and "Path=/;" in cookie and "Domain" not in cookie


def test_without_a_trusted_front_forwarded_headers_are_not_believed(make_app):
    app = make_app(LOGIN_FAILURES_PER_ADDRESS=2)
    add_users(app, "alice", "bob", "carol")
    for i, name in enumerate(("alice", "bob")):
        failed = through_a_front(app, f"198.51.100.{i}").login(name, "wrong guess")
        assert failed.status_code == 401
        assert "Strict-Transport-Security" not in failed.headers
    assert through_a_front(app, "198.51.100.9").login("carol", PASSWORD).status_code == 429


# --- headers --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/register/", "/no/such/page", "/healthz", "/static/style.css"])
def test_every_answer_forbids_framing_sniffing_and_foreign_content(client, path):
    headers = client.get(path).headers
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "default-src 'self'" in headers["Content-Security-Policy"]


def test_pages_need_no_inline_script_or_style(app, alice):
    add_tweets(app, add_users(app, "bob")[0], "hi")
    alice.post("/users/bob/follow")
    paths = ("/", "/tweets/", "/users/", "/users/?q=b", "/users/bob/", "/users/bob/followers/", "/users/bob/following/")
    for path in paths:
        page = text_of(alice.get(path, follow_redirects=True)).lower()
        assert "style=" not in page and "<style" not in page and "javascript:" not in page
        # Scripts only from this site's static files, never a line of script in the page.
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
        assert scripts == [(' src="/static/tweepy.js" defer', "")], path


# --- memory a stranger can fill -----------------------------------------------------------


def cached_keys(app) -> list[str]:
    return list(app.extensions["tweepy_cache"].entries)


def test_names_and_pages_of_a_strangers_choosing_leave_nothing_in_the_cache(make_app):
    app = make_app(CACHE="local")
    stranger = Browser(app.test_client())
    long_name = "x" * 200_000
    for _ in range(3):
        response = stranger.fill(
            "/register/",
            {"name": long_name, "email": "a@example.com", "password": "long enough", "confirm": "long enough"},
        )
        assert response.status_code == 400
    assert stranger.get("/users/" + "y" * 8000 + "/").status_code == 404
    assert stranger.get("/users/nobody_here/").status_code == 404
    alice = sign_up(app, "alice")
    for page in (999, 1000, 1_000_000):
        assert alice.get(f"/users/?page={page}").status_code == 200
    assert all(len(key) < 64 for key in cached_keys(app))
    assert not any(key.startswith(("user_named:", "users_page:9", "users_page:1000")) for key in cached_keys(app))


def test_the_read_cache_stays_within_its_byte_budget(make_app):
    budget = 50_000
    app = make_app(CACHE="local", CACHE_BYTES=budget, PAGE_SIZE=50)
    add_users(app, *[f"user{i}" for i in range(1, 2001)])
    with app.test_request_context():
        for page in range(1, 41):
            assert len(queries.users_page(page)) == 50
    entries = app.extensions["tweepy_cache"].entries
    assert 0 < entries.currsize <= budget
    assert len(entries) < 40


# --- a busy database ------------------------------------------------------------------------


@pytest.mark.parametrize(("tuned", "lock"), [(False, "EXCLUSIVE"), (True, "IMMEDIATE")], ids=["journal", "wal"])
def test_a_write_that_finds_the_database_locked_is_a_503_and_stores_nothing(make_app, tmp_path, tuned, lock):
    app = make_app(SQLITE_BUSY_TIMEOUT_MS=50, SQLITE_TUNED=tuned)
    alice = sign_up(app, "alice")
    token = csrf_token(alice.get("/tweets/"))
    blocker = sqlite3.connect(tmp_path / "tweepy.sqlite3")
    blocker.execute(f"BEGIN {lock}")
    try:
        response = alice.client.post("/tweets/", data={"tweet": "while locked", "csrf_token": token})
    finally:
        blocker.rollback()
        blocker.close()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "Nothing was saved" in text_of(response)
    assert count(app, Tweet) == 0
