"""Rendered tweets kept per process: what a kept fragment may hold, and how long.

The rule (tweepy/fragments.py): a fragment shows only what its row and the
template hold, and is kept under both, so nothing it renders can change
without its key changing too.
"""

from __future__ import annotations

import time
from datetime import datetime

from flask import template_rendered
from helpers.browser import Browser, sign_up
from helpers.pages import csrf_token, forms_of, tweet_texts
from helpers.stored import user_id

from tweepy import fragments, queries, signing
from tweepy.cache import cache
from tweepy.queries import TweetRow

ROW = TweetRow(id=7, author_id=2, author_name="bob", text="hello <world>", posted=datetime(2026, 1, 2, 3, 4))


def render(app, row, viewer=None):
    with app.test_request_context("/tweets/"):
        if viewer is not None:
            from flask_login import login_user

            from tweepy.auth import CurrentUser

            login_user(CurrentUser(viewer, f"viewer{viewer}", "a-session"))
        return str(app.jinja_env.globals["rendered_tweet"](row))


def kept(app):
    return app.extensions["tweepy_fragments"]


def test_someone_elses_tweet_renders_the_same_for_every_viewer(make_app):
    app = make_app(FRAGMENT_CACHE=False)
    assert render(app, ROW, viewer=1) == render(app, ROW, viewer=3) == render(app, ROW)


def test_a_fragment_is_escaped_and_carries_no_delete_button(make_app):
    html = render(make_app(FRAGMENT_CACHE=True), ROW)
    assert "hello &lt;world&gt;" in html
    assert "delete" not in html.lower() and "csrf" not in html


def test_a_changed_row_is_rendered_anew_never_shown_from_the_old_fragment(make_app):
    app = make_app(FRAGMENT_CACHE=True)
    assert "hello" in render(app, ROW)
    edited = ROW._replace(text="edited")
    assert "edited" in render(app, edited) and "hello" not in render(app, edited)
    assert "@carol" in render(app, ROW._replace(author_name="carol"))
    assert len(kept(app)) == 3


def test_a_changed_template_keys_its_fragments_apart(make_app):
    app = make_app(FRAGMENT_CACHE=True)
    digest = fragments.template_digest(app)
    assert fragments.fragment_key(digest, ROW) != fragments.fragment_key(digest[::-1], ROW)
    assert len(digest) == 16 and digest == fragments.template_digest(make_app())


def test_fragments_are_kept_only_with_their_own_setting(make_app):
    off = make_app(CACHE="local", FRAGMENT_CACHE=False)
    render(off, ROW)
    assert len(kept(off)) == 0
    on = make_app(FRAGMENT_CACHE=True)
    render(on, ROW)
    assert len(kept(on)) == 1


def test_kept_fragments_stay_within_their_byte_budget(make_app):
    budget = 64 * 1024
    app = make_app(FRAGMENT_CACHE=True, FRAGMENT_CACHE_BYTES=budget)
    for i in range(2000):
        render(app, ROW._replace(id=i, text="x" * 280))
    assert 0 < kept(app).currsize <= budget
    assert len(kept(app)) < 2000


def render_own(app, row, next_url):
    """``row`` on a page of its author's: the fragments and the page's own token."""
    from flask_login import login_user
    from flask_wtf.csrf import generate_csrf

    from tweepy.auth import CurrentUser

    with app.test_request_context("/tweets/"):
        login_user(CurrentUser(row.author_id, row.author_name, "a-session"))
        return str(app.jinja_env.globals["rendered_tweets"]((row,), next_url)), generate_csrf()


def test_ones_own_tweet_is_kept_with_holes_each_page_fills_with_its_token_and_way_back(make_app):
    app = make_app(FRAGMENT_CACHE=True)
    first, first_token = render_own(app, ROW, "/tweets/")
    again, again_token = render_own(app, ROW, "/users/bob/?before=9&x=<y>")
    assert f'value="{first_token}"' in first and 'value="/tweets/"' in first
    assert f'value="{again_token}"' in again and 'value="/users/bob/?before=9&amp;x=&lt;y&gt;"' in again
    assert first_token != again_token
    assert "<tweepy:" not in first + again
    (kept_html,) = kept(app).values()  # one fragment, rendered once, with its holes
    assert str(fragments.CSRF_HOLE) in kept_html and str(fragments.NEXT_HOLE) in kept_html


def test_a_tweet_that_spells_a_hole_is_shown_as_text_never_filled(make_app):
    app = make_app(FRAGMENT_CACHE=True)
    sneaky = ROW._replace(text="<tweepy:csrf> <tweepy:next>")
    html, token = render_own(app, sneaky, "/tweets/")
    assert "&lt;tweepy:csrf&gt; &lt;tweepy:next&gt;" in html
    assert html.count(token) == 1  # the delete button's, nowhere else


# The whole first page of a timeline, kept per viewer (fragments.kept_page), as the default stage serves it.
KEPT_PAGES = {"CACHE": "local", "TIMELINE_FROM_CACHED_PAGES": True, "FRAGMENT_CACHE": True}


def rendered_templates(app) -> list[str]:
    """The names of the templates ``app`` renders from now on (Flask's own signal)."""
    seen = []
    template_rendered.connect(lambda _app, template, context: seen.append(template.name), app, weak=False)
    return seen


def test_a_timeline_is_rendered_once_and_each_visit_gets_its_own_token_and_way_back(make_app, monkeypatch):
    app = make_app(**KEPT_PAGES)
    alice = sign_up(app, "alice")
    assert alice.post("/tweets/", {"tweet": "mine <b>"}).status_code == 303
    now = [float(int(time.time()) + 1)]
    monkeypatch.setattr(time, "time", lambda: now[0])
    seen = rendered_templates(app)

    first = alice.get("/tweets/")
    now[0] += signing.TOKEN_PERIOD_S  # the next minute: a new signed token
    second = alice.get("/tweets/?from=<here>")

    assert seen.count("timeline.html") == 1
    assert tweet_texts(first) == tweet_texts(second) == ["mine <b>"]
    assert csrf_token(first) != csrf_token(second)
    for page, way_back in ((first, "/tweets/"), (second, "/tweets/?from=<here>")):
        token = csrf_token(page)
        assert all(form["csrf_token"] == token for form in forms_of(page))
        (delete,) = [form for form in forms_of(page) if form["action"].endswith("/delete")]
        assert delete["next"] == way_back
        assert "tweepy:" not in page.get_data(as_text=True)
    assert alice.client.post("/tweets/", data={"tweet": "next", "csrf_token": csrf_token(second)}).status_code == 303


def test_a_kept_timeline_shows_a_new_tweet_at_once(make_app):
    app = make_app(**KEPT_PAGES)
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert alice.post("/users/bob/follow").status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == []
    assert bob.post("/tweets/", {"tweet": "hello followers"}).status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["hello followers"]


def test_a_kept_timeline_outlives_its_pages_ttl_and_after_its_own_an_unchanged_read_renders_nothing(
    make_app, monkeypatch
):
    app = make_app(**KEPT_PAGES, CACHE_TTL=60)  # well short of when a process that slept drops everything
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert alice.post("/users/bob/follow").status_code == 303
    assert bob.post("/tweets/", {"tweet": "hello followers"}).status_code == 303
    seen = rendered_templates(app)
    first = alice.get("/tweets/")
    bobs_page = queries.newest_tweets_by.key(user_id(app, "bob"))
    with app.app_context():
        read_before = cache().entries.pop(bobs_page)  # as when its TTL ends

    alice.get("/tweets/")
    with app.app_context():
        assert bobs_page not in cache().entries, "the kept merge stands: no write ended it, so nothing is read"

    later = time.monotonic() + app.config["CACHE_TTL"]
    monkeypatch.setattr(time, "monotonic", lambda: later)  # the kept merge's own TTL ends
    again = alice.get("/tweets/")

    with app.app_context():
        read_again = cache().entries[bobs_page]
    assert read_again == read_before and read_again is not read_before
    assert seen.count("timeline.html") == 1
    assert tweet_texts(first) == tweet_texts(again) == ["hello followers"]


def test_a_kept_timeline_is_byte_for_byte_the_page_rendered_afresh(make_app, monkeypatch):
    app = make_app(**KEPT_PAGES)
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert alice.post("/users/bob/follow").status_code == 303
    assert bob.post("/tweets/", {"tweet": "from bob & co"}).status_code == 303
    assert alice.post("/tweets/", {"tweet": "mine <i>"}).status_code == 303
    now = float(int(time.time()))
    monkeypatch.setattr(time, "time", lambda: now)  # one token for the three visits
    kept_twice = [alice.get("/tweets/").get_data(), alice.get("/tweets/").get_data()]
    monkeypatch.setitem(app.extensions, fragments.KEEP_PAGES, False)  # kept_page then calls render_template itself
    afresh = alice.get("/tweets/").get_data()
    assert kept_twice == [afresh, afresh]
    assert b"tweepy:" not in afresh


def test_a_change_of_rows_renders_the_list_again_and_keeps_the_frame(make_app):
    app = make_app(**KEPT_PAGES)
    alice, bob = sign_up(app, "alice"), sign_up(app, "bob")
    assert alice.post("/users/bob/follow").status_code == 303
    alice.get("/tweets/")  # shows the follow's message, rendered afresh since it is used up
    seen = rendered_templates(app)
    assert tweet_texts(alice.get("/tweets/")) == []
    assert bob.post("/tweets/", {"tweet": "first"}).status_code == 303
    assert tweet_texts(alice.get("/tweets/")) == ["first"]
    assert alice.post("/tweets/", {"tweet": "second"}).status_code == 303
    page = alice.get("/tweets/")
    assert tweet_texts(page) == ["second", "first"]
    assert seen.count("timeline.html") == 1  # the frame, once; the list three times, from the macro alone
    (delete,) = [form for form in forms_of(page) if form["action"].endswith("/delete")]
    assert delete["csrf_token"] == csrf_token(page) and delete["next"] == "/tweets/"


def test_a_message_to_flash_is_shown_on_the_next_page_only(make_app):
    app = make_app(**KEPT_PAGES)
    browser = Browser(app.test_client())
    assert browser.get("/tweets/", follow_redirects=True).status_code == 200  # the login form
    assert browser.register("alice").status_code == 303
    assert "Welcome to tweepy, alice!" in browser.get("/tweets/").get_data(as_text=True)
    assert "Welcome" not in browser.get("/tweets/").get_data(as_text=True)
    assert "Welcome" not in browser.get("/tweets/").get_data(as_text=True)


def test_a_timeline_page_is_kept_only_with_the_fragment_setting(make_app):
    app = make_app(**{**KEPT_PAGES, "FRAGMENT_CACHE": False})
    alice = sign_up(app, "alice")
    seen = rendered_templates(app)
    alice.get("/tweets/")
    alice.get("/tweets/")
    assert seen.count("timeline.html") == 2
