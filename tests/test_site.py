"""What belongs to every page: the health check, error pages, body size, CSRF and
login rules across all endpoints, and the URL map itself."""

from __future__ import annotations

import html
import os
import re

import pytest
from helpers.browser import Browser
from helpers.pages import csrf_token, text_of
from helpers.stored import add_tweets, add_users, count

from tweepy import errors, site
from tweepy.extensions import db
from tweepy.models import Follow, Tweet, User

MIB = 1024 * 1024

# Every route of the app, nothing more (no endpoint wipes data).
CONTRACT = {
    ("/", frozenset({"GET", "POST"})),
    ("/register/", frozenset({"GET", "POST"})),
    ("/logout/", frozenset({"POST"})),
    ("/logout/everywhere", frozenset({"POST"})),
    ("/tweets/", frozenset({"GET", "POST"})),
    ("/tweets/<int:tweet_id>/delete", frozenset({"POST"})),
    ("/users/", frozenset({"GET"})),
    ("/users/<name>/", frozenset({"GET"})),
    ("/users/<name>/followers/", frozenset({"GET"})),
    ("/users/<name>/following/", frozenset({"GET"})),
    ("/users/<name>/follow", frozenset({"POST"})),
    ("/users/<name>/unfollow", frozenset({"POST"})),
    ("/healthz", frozenset({"GET"})),
    ("/static/<path:filename>", frozenset({"GET"})),
}

LOGIN_REQUIRED = [
    ("GET", "/tweets/"),
    ("GET", "/users/"),
    ("POST", "/tweets/"),
    ("POST", "/tweets/1/delete"),
    ("POST", "/users/bob/follow"),
    ("POST", "/users/bob/unfollow"),
]


def test_url_map_is_the_contract(app):
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        # Converter arguments (a bounded int, say) do not change the contract.
        path = re.sub(r"<int\([^)]*\):", "<int:", rule.rule)
        routes.setdefault(path, set()).update(rule.methods - {"HEAD", "OPTIONS"})
    assert {(path, frozenset(methods)) for path, methods in routes.items()} == CONTRACT


def test_flask_asks_once_per_hook_or_view_whether_it_is_a_coroutine(app, alice, monkeypatch):
    import flask.app

    asked, real = [], flask.app.iscoroutinefunction
    monkeypatch.setattr(flask.app, "iscoroutinefunction", lambda func: asked.append(func) or real(func))
    app.sync_answers.clear()  # as in a new worker
    for _ in range(3):
        assert alice.get("/tweets/").status_code == 200
    assert asked, "the first request asks"
    assert len(asked) == len(set(asked)), "and none is asked again"

    async def a_coroutine():
        return "ok"

    with pytest.raises(RuntimeError, match="async"):  # still told apart: Flask without its async extra refuses it
        app.ensure_sync(a_coroutine)


def test_flask_runs_every_view_and_hook_through_ensure_sync_which_gives_a_plain_function_back(app, alice, monkeypatch):
    """Tweepy.ensure_sync keeps Flask's answer for each function: sound while Flask passes each view and
    hook through ensure_sync before calling it, and answers a plain function with that very function."""
    from flask import Flask

    seen, real = [], type(app).ensure_sync
    monkeypatch.setattr(type(app), "ensure_sync", lambda self, func: seen.append(func) or real(self, func))
    assert alice.get("/tweets/").status_code == 200
    hooks = [
        func for funcs in (*app.before_request_funcs.values(), *app.after_request_funcs.values()) for func in funcs
    ]
    called = [app.view_functions["tweets.timeline"], *hooks]
    assert hooks and all(func in seen for func in called)
    for func in called:
        assert Flask.ensure_sync(app, func) is func
        assert app.ensure_sync(func) is func


def test_healthz_says_ok_when_the_database_answers(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_data(as_text=True).strip() == "ok"
    assert response.mimetype == "text/plain"


def test_healthz_needs_no_login_and_sets_no_session(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers


def test_healthz_reports_503_when_the_database_is_gone(make_app, tmp_path):
    app = make_app(DATABASE_URL=f"sqlite:///{tmp_path / 'healthz.sqlite3'}")
    (tmp_path / "healthz.sqlite3").unlink()
    (tmp_path / "healthz.sqlite3").mkdir()  # the database file is now a directory: unopenable
    with app.app_context():
        from tweepy.extensions import db

        db.engine.dispose()
    response = app.test_client().get("/healthz")
    assert response.status_code == 503


@pytest.mark.parametrize(
    "path", ["/nowhere", "/tweets/abc/delete", "/users/bob/tweets", "/tweets/1/", "/static/nothing.css"]
)
def test_unknown_path_is_a_styled_404_page(client, path):
    response = client.get(path)
    assert response.status_code == 404
    page = text_of(response)
    assert '<link rel="stylesheet" href="/static/style.css">' in page
    assert "404 · Not Found" in page
    assert 'href="/register/"' in page  # the site's navigation, not a bare error


def test_stylesheet_is_served_locally(client):
    response = client.get("/static/style.css")
    assert response.status_code == 200
    assert response.mimetype == "text/css"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/logout/", {"POST"}),
        ("GET", "/tweets/1/delete", {"POST"}),
        ("GET", "/users/bob/follow", {"POST"}),
        ("GET", "/users/bob/unfollow", {"POST"}),
        ("PUT", "/tweets/", {"GET", "HEAD", "POST"}),
        ("DELETE", "/tweets/", {"GET", "HEAD", "POST"}),
        ("DELETE", "/users/bob/", {"GET", "HEAD"}),
        ("POST", "/users/", {"GET", "HEAD"}),
        ("POST", "/healthz", {"GET", "HEAD"}),
        ("PATCH", "/", {"GET", "HEAD", "POST"}),
    ],
)
def test_wrong_method_is_405_with_an_allow_header(alice, method, path, allowed):
    response = alice.client.open(path, method=method)
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["Allow"].split(",")} - {"OPTIONS"} == allowed
    assert "405 · Method Not Allowed" in text_of(response)


def test_tweet_body_over_1_mib_is_413_and_stores_nothing(app, alice):
    token = csrf_token(alice.get("/tweets/"))
    response = alice.client.post("/tweets/", data={"tweet": "x" * MIB, "csrf_token": token})
    assert response.status_code == 413
    assert "413" in text_of(response)
    assert count(app, Tweet) == 0


@pytest.mark.parametrize("path", ["/", "/register/", "/logout/", "/users/bob/follow"])
def test_any_body_over_1_mib_is_413(client, path):
    response = client.post(path, data={"padding": "x" * MIB})
    assert response.status_code == 413


def test_multipart_body_over_1_mib_is_413(client):
    response = client.post("/", data={"padding": "x" * MIB}, content_type="multipart/form-data")
    assert response.status_code == 413


def test_raw_body_over_1_mib_is_413(client):
    response = client.post("/", data=b"x" * (MIB + 1), content_type="application/octet-stream")
    assert response.status_code == 413


def test_body_under_the_limit_is_not_413(app, alice):
    token = csrf_token(alice.get("/tweets/"))
    response = alice.client.post("/tweets/", data={"tweet": "fine", "padding": "x" * 1000, "csrf_token": token})
    assert response.status_code == 303


@pytest.mark.parametrize(("method", "path"), LOGIN_REQUIRED)
def test_logged_out_visitor_is_sent_to_the_login_page(app, client, method, path):
    (bob_id,) = add_users(app, "bob")
    add_tweets(app, bob_id, "bob's")
    token = csrf_token(client.get("/"))
    response = client.open(
        path, method=method, data={"csrf_token": token, "tweet": "anonymous"} if method == "POST" else None
    )
    assert response.status_code in (302, 303)
    assert response.headers["Location"].split("?")[0] == "/"
    assert (count(app, Tweet), count(app, Follow)) == (1, 0)


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/", {"name": "bob", "password": "correct horse"}),
        (
            "/register/",
            {"name": "eve", "email": "eve@example.com", "password": "long enough", "confirm": "long enough"},
        ),
        ("/logout/", {}),
        ("/logout/everywhere", {}),
        ("/tweets/", {"tweet": "forged"}),
        ("/tweets/1/delete", {}),
        ("/users/bob/follow", {}),
        ("/users/bob/unfollow", {}),
    ],
)
def test_every_post_with_a_forged_csrf_token_is_400_and_changes_nothing(app, alice, path, data):
    (bob_id,) = add_users(app, "bob")
    add_tweets(app, bob_id, "bob's")
    before = (count(app, User), count(app, Tweet), count(app, Follow))
    response = alice.client.post(path, data={**data, "csrf_token": "forged"})
    assert response.status_code == 400
    assert "Form expired" in text_of(response)
    assert (count(app, User), count(app, Tweet), count(app, Follow)) == before
    assert alice.get("/tweets/").status_code == 200  # still logged in as before


def test_csrf_token_of_another_session_is_refused(app, alice):
    other = app.test_client()
    stolen = csrf_token(other.get("/"))
    response = alice.client.post("/tweets/", data={"tweet": "forged", "csrf_token": stolen})
    assert response.status_code == 400
    assert count(app, Tweet) == 0


@pytest.mark.parametrize("body", ['{"tweet": "json"}', "not json", "[1, 2]"])
def test_json_post_without_csrf_token_is_400_not_500(app, alice, body):
    response = alice.client.post("/tweets/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert count(app, Tweet) == 0


def test_every_page_loads_its_one_script_from_this_site_and_holds_none_inline(alice):
    page = text_of(alice.get("/tweets/"))
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/tweepy.js" defer>']
    script = alice.get("/static/tweepy.js")
    assert script.status_code == 200 and script.mimetype in ("text/javascript", "application/javascript")
    # The policy that lets it run lets nothing inline run.
    policy = alice.get("/tweets/").headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy


def test_pages_load_nothing_from_other_sites(alice):
    page = text_of(alice.get("/tweets/"))
    assert "http://" not in page and "https://" not in page  # usable without network access


# --- refusals -----------------------------------------------------------------


def test_every_kind_of_refusal_has_an_http_status():
    kinds = {kind for kind in vars(errors).values() if isinstance(kind, type) and issubclass(kind, errors.Refused)}
    assert kinds - {errors.Refused} == set(site.STATUS_OF_REFUSAL)


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (errors.Invalid("No."), 400),
        (errors.NotAllowed("Not yours."), 403),
        (errors.NotFound("Gone."), 404),
        (errors.Taken("name"), 409),
    ],
)
def test_a_refusal_from_below_the_views_is_its_status_with_the_reason_shown(make_app, refusal, status):
    app = make_app()

    @app.get("/refuse")
    def refuse():
        raise refusal

    response = app.test_client().get("/refuse")
    assert response.status_code == status
    assert html.escape(str(refusal)) in text_of(response)


# --- which process answered ---------------------------------------------------


def test_answers_name_their_worker_only_when_asked(make_app):
    assert "X-Tweepy-Worker" not in make_app().test_client().get("/healthz").headers
    named = make_app(WORKER_HEADER=True).test_client().get("/healthz").headers["X-Tweepy-Worker"]
    assert named.endswith(f":{os.getpid()}")


def test_a_request_that_finds_no_free_database_connection_is_told_to_try_again(make_app):
    app = make_app(DB_POOL_SIZE=1, DB_POOL_OVERFLOW=0, DB_POOL_TIMEOUT=0.2)
    someone = Browser(app.test_client())
    assert someone.register("alice").status_code == 303
    with app.app_context(), db.engine.connect():  # the pool's only connection, held
        answer = someone.get("/users/")
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
    assert "busy" in answer.get_data(as_text=True).lower()
    assert someone.get("/users/").status_code == 200, "served again once a connection is free"
