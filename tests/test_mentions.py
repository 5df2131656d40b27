"""Mentions: "@name" in a tweet links to that profile, on the timeline and on profiles,
escaped as any tweet is, and right in a kept fragment whoever registers later."""

from __future__ import annotations

import pytest
from helpers.browser import sign_up
from helpers.pages import text_of
from helpers.stored import add_tweets, add_users

from tweepy.tweets import mentions

KEPT_PAGES = {"CACHE": "local", "TIMELINE_FROM_CACHED_PAGES": True, "FRAGMENT_CACHE": True}


def link(name: str) -> str:
    return f'<a class="mention" href="/users/{name}/">@{name}</a>'


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("hi @bob", f"hi {link('bob')}"),
        ("@bob, @Carol_9!", f"{link('bob')}, {link('Carol_9')}!"),
        ("(@bob)", f"({link('bob')})"),
        ("<b>@bob</b> & co", f"&lt;b&gt;{link('bob')}&lt;/b&gt; &amp; co"),
        ("mail bob@example.com", "mail bob@example.com"),  # inside a word: an address, not a mention
        ("@ab is too short", "@ab is too short"),
        ("@" + "x" * 33, "@" + "x" * 33),  # longer than any name: no part of it is linked
        ("@@bob", "@@bob"),
        ("@bob@example", "@bob@example"),
        ('@"><script>', "@&#34;&gt;&lt;script&gt;"),
        ("no at sign <i>", "no at sign &lt;i&gt;"),
    ],
)
def test_a_mention_is_linked_and_everything_else_escaped(text, html):
    assert str(mentions(text, "/users/")) == html


def test_a_mention_links_to_the_profile_on_the_timeline_and_the_profile(app, alice):
    bob = sign_up(app, "bob")
    bob.post("/tweets/", {"tweet": "hello @alice and @nobody_here"})
    alice.post("/users/bob/follow")
    for page in ("/tweets/", "/users/bob/"):
        html = text_of(alice.get(page))
        assert f"hello {link('alice')} and {link('nobody_here')}" in html


def test_a_kept_fragment_mentioning_someone_not_yet_registered_leads_to_them_once_they_are(make_app):
    app = make_app(**KEPT_PAGES)
    (bob_id,) = add_users(app, "bob")
    add_tweets(app, bob_id, "waiting for @carol")
    alice = sign_up(app, "alice")
    alice.post("/users/bob/follow")
    assert link("carol") in text_of(alice.get("/tweets/"))  # kept now
    assert alice.get("/users/carol/").status_code == 404
    sign_up(app, "carol")
    assert link("carol") in text_of(alice.get("/tweets/"))
    assert alice.get("/users/carol/").status_code == 200
