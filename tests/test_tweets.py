"""The timeline and tweets: GET|POST /tweets/, POST /tweets/<id>/delete."""

from __future__ import annotations

import re

import pytest
from helpers.browser import sign_up
from helpers.pages import csrf_token, errors, form_actions, forms_of, link, text_of, tweet_ids, tweet_texts
from helpers.stored import add_follow, add_tweets, add_users, count, tweets_by, user_id
from sqlalchemy import select

from tweepy.extensions import db
from tweepy.models import Tweet


def post_tweet(browser, text):
    return browser.post("/tweets/", {"tweet": text})


# --- the timeline -----------------------------------------------------------


def test_timeline_holds_the_post_form(alice):
    response = alice.get("/tweets/")
    assert response.status_code == 200
    assert "/tweets/" in form_actions(response)
    assert "<textarea" in text_of(response) and 'name="tweet"' in text_of(response)


def test_a_refused_tweet_comes_back_in_the_box_with_its_reason_and_a_fresh_box_is_empty(alice):
    refused = text_of(post_tweet(alice, "x" * 281))
    assert 'aria-invalid="true"' in refused and "x" * 281 in refused
    fresh = text_of(alice.get("/tweets/"))  # the empty box, kept once rendered
    assert "aria-invalid" not in fresh and "x" * 281 not in fresh
    assert "What&#39;s happening?</label>" in fresh
    assert re.search(r'<textarea id="tweet" maxlength="280" name="tweet" required>\s*</textarea>', fresh)


def test_a_tweet_carries_its_exact_utc_time_for_the_browser_to_show_relative(app, alice):
    post_tweet(alice, "now")
    with app.app_context():
        posted = db.session.scalar(select(Tweet.posted))
    exact = f"{posted:%Y-%m-%d %H:%M}"
    assert f'<time datetime="{posted.isoformat()}Z" title="{exact} UTC">{exact}</time>' in text_of(
        alice.get("/tweets/")
    )


def test_timeline_shows_own_and_followed_tweets_newest_first_and_not_others(app, alice):
    bob, carol = sign_up(app, "bob"), sign_up(app, "carol")
    post_tweet(bob, "bob before")
    post_tweet(carol, "carol, not followed")
    post_tweet(alice, "alice herself")
    post_tweet(bob, "bob after")
    alice.post("/users/bob/follow")
    assert tweet_texts(alice.get("/tweets/")) == ["bob after", "alice herself", "bob before"]


def test_timeline_of_someone_who_follows_nobody_is_their_own_tweets(app, alice):
    post_tweet(sign_up(app, "bob"), "bob's")
    post_tweet(alice, "mine")
    assert tweet_texts(alice.get("/tweets/")) == ["mine"]


def test_timeline_pages_50_tweets_at_a_time_with_an_older_link(app, alice):
    alice_id, (bob_id, carol_id) = user_id(app, "alice"), add_users(app, "bob", "carol")
    add_follow(app, alice_id, bob_id)
    for i in range(60):  # interleaved: alice, bob, carol (not followed), ...
        add_tweets(app, alice_id, f"alice {i}")
        add_tweets(app, bob_id, f"bob {i}")
        add_tweets(app, carol_id, f"carol {i}")
    expected = [f"{who} {i}" for i in reversed(range(60)) for who in ("bob", "alice")]

    first = alice.get("/tweets/")
    assert tweet_texts(first) == expected[:50]
    older = link(first, "next")
    assert older == f"/tweets/?before={tweet_ids(first)[-1]}"

    second = alice.get(older)
    assert second.status_code == 200
    assert tweet_texts(second) == expected[50:100]

    last = alice.get(link(second, "next"))
    assert tweet_texts(last) == expected[100:]
    assert link(last, "next") is None


def test_timeline_shorter_than_a_page_has_no_older_link(alice):
    post_tweet(alice, "only one")
    assert link(alice.get("/tweets/"), "next") is None


@pytest.mark.parametrize("before", ["abc", "", "0", "-1", "1.5", "१२", "99999999999999999999999"])
def test_bad_before_parameter_is_400_not_500(alice, before):
    assert alice.get(f"/tweets/?before={before}").status_code == 400


def test_before_larger_than_every_tweet_id_is_the_first_page(alice):
    post_tweet(alice, "hello")
    assert tweet_texts(alice.get(f"/tweets/?before={2**63 - 1}")) == ["hello"]


# --- posting ----------------------------------------------------------------


def test_posting_a_tweet_stores_it_and_redirects_303_to_the_timeline(app, alice):
    response = post_tweet(alice, "hello, world")
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"
    assert tweets_by(app, "alice") == ["hello, world"]
    assert tweet_texts(alice.get("/tweets/")) == ["hello, world"]


def test_tweet_is_stored_stripped_and_280_characters_are_accepted(app, alice):
    text = "é" * 279 + "!"
    response = post_tweet(alice, f"  \n{text}\t  ")
    assert response.status_code == 303
    assert tweets_by(app, "alice") == [text]


def test_single_character_tweet_is_accepted(app, alice):
    assert post_tweet(alice, "a").status_code == 303
    assert tweets_by(app, "alice") == ["a"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x" * 281, "At most 280 characters."),
        ("  " + "x" * 281 + "  ", "At most 280 characters."),
        ("", "Write something first."),
        ("   \n\t  ", "Write something first."),
    ],
    ids=["281 characters", "281 characters between spaces", "empty", "whitespace only"],
)
def test_invalid_tweet_is_400_with_the_reason_and_stores_nothing(app, alice, text, reason):
    response = post_tweet(alice, text)
    assert response.status_code == 400
    assert reason in errors(response)
    assert "/tweets/" in form_actions(response)  # the timeline again, with its form
    assert count(app, Tweet) == 0


def test_post_without_a_tweet_field_is_400_and_stores_nothing(app, alice):
    response = alice.post("/tweets/", {})
    assert response.status_code == 400
    assert count(app, Tweet) == 0


def test_post_without_csrf_token_is_400_and_stores_nothing(app, alice):
    response = alice.client.post("/tweets/", data={"tweet": "forged"})
    assert response.status_code == 400
    assert count(app, Tweet) == 0


def test_script_in_a_tweet_is_shown_as_text_not_run(app, alice):
    attack = '<script>alert("pwned")</script>'
    post_tweet(alice, attack)
    for page in ("/tweets/", "/users/alice/"):
        body = text_of(alice.get(page))
        assert "<script>" not in body
        assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in body
    assert tweets_by(app, "alice") == [attack]


# --- deleting ---------------------------------------------------------------


def test_own_tweets_carry_a_delete_button_and_others_do_not(app, alice):
    bob = sign_up(app, "bob")
    post_tweet(bob, "bob's")
    post_tweet(alice, "mine")
    alice.post("/users/bob/follow")
    mine, bobs = tweet_ids(alice.get("/users/alice/"))[0], tweet_ids(bob.get("/users/bob/"))[0]
    for page in ("/tweets/", "/users/alice/", "/users/bob/"):
        actions = form_actions(alice.get(page))
        assert (f"/tweets/{mine}/delete" in actions) == (page != "/users/bob/")
        assert f"/tweets/{bobs}/delete" not in actions


def test_each_delete_button_carries_this_pages_token_and_way_back(app, alice):
    post_tweet(alice, "first")
    post_tweet(alice, "second")
    page = alice.get("/tweets/?before=999999")
    token = csrf_token(page)  # the page's own, in its first form
    buttons = [f for f in forms_of(page) if f["action"].endswith("/delete")]
    assert len(buttons) == 2
    assert all(b["csrf_token"] == token and b["next"] == "/tweets/?before=999999" for b in buttons)
    other_page = alice.get("/users/alice/")
    assert all(b["next"] == "/users/alice/" for b in forms_of(other_page) if b["action"].endswith("/delete"))
    assert "<tweepy:" not in text_of(page) + text_of(other_page)


def test_deleting_own_tweet_removes_it_and_redirects_303(app, alice):
    post_tweet(alice, "keep")
    post_tweet(alice, "oops")
    oops = tweet_ids(alice.get("/tweets/"))[0]
    response = alice.post(f"/tweets/{oops}/delete")
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"
    assert tweets_by(app, "alice") == ["keep"]
    assert tweet_texts(alice.get("/tweets/")) == ["keep"]


def test_deleting_from_the_profile_goes_back_to_the_profile(app, alice):
    post_tweet(alice, "oops")
    (oops,) = tweet_ids(alice.get("/users/alice/"))
    response = alice.post(f"/tweets/{oops}/delete", {"next": "/users/alice/"}, page="/users/alice/")
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/alice/"


@pytest.mark.parametrize("unsafe", ["//evil.com", "http://evil.com", "/\\evil.com"])
def test_deleting_never_redirects_off_the_site(alice, unsafe):
    post_tweet(alice, "oops")
    (oops,) = tweet_ids(alice.get("/tweets/"))
    response = alice.post(f"/tweets/{oops}/delete", {"next": unsafe})
    assert response.status_code == 303
    assert response.headers["Location"] == "/tweets/"


def test_deleting_someone_elses_tweet_is_403_and_keeps_it(app, alice):
    bob = sign_up(app, "bob")
    post_tweet(bob, "bob's")
    (bobs,) = tweet_ids(bob.get("/tweets/"))
    assert alice.post(f"/tweets/{bobs}/delete").status_code == 403
    assert tweets_by(app, "bob") == ["bob's"]


@pytest.mark.parametrize("missing", ["12345", "99999999999999999999999"])
def test_deleting_a_missing_tweet_is_404(alice, missing):
    assert alice.post(f"/tweets/{missing}/delete").status_code == 404


def test_deleting_twice_is_404_the_second_time(app, alice):
    post_tweet(alice, "oops")
    (oops,) = tweet_ids(alice.get("/tweets/"))
    assert alice.post(f"/tweets/{oops}/delete").status_code == 303
    assert alice.post(f"/tweets/{oops}/delete").status_code == 404


def test_delete_without_csrf_token_is_400_and_keeps_the_tweet(app, alice):
    post_tweet(alice, "keep")
    (keep,) = tweet_ids(alice.get("/tweets/"))
    assert alice.client.post(f"/tweets/{keep}/delete").status_code == 400
    assert tweets_by(app, "alice") == ["keep"]


def test_a_deleted_tweets_id_is_never_given_to_a_new_tweet(app, alice):
    """Ids are cache keys (rendered tweets) and page bounds: reusing one would show old text."""
    alice.post("/tweets/", {"tweet": "first"})
    with app.app_context():
        from sqlalchemy import func, select

        from tweepy.extensions import db
        from tweepy.models import Tweet

        newest = db.session.scalar(select(func.max(Tweet.id)))
    assert alice.post(f"/tweets/{newest}/delete").status_code == 303
    alice.post("/tweets/", {"tweet": "second"})
    with app.app_context():
        assert db.session.scalar(select(func.max(Tweet.id))) == newest + 1
