"""Users and following: GET /users/, GET /users/<name>/, POST /users/<name>/follow|unfollow."""

from __future__ import annotations

import pytest
from helpers.browser import sign_up
from helpers.pages import form_actions, link, text_of, tweet_texts, user_names
from helpers.stored import add_tweets, add_users, follows, user_id

UNSAFE_NEXT = ["//evil.com", "http://evil.com", "https://evil.com/users/", "/\\evil.com", "javascript:alert(1)"]


# --- the list of users ------------------------------------------------------


def test_users_list_pages_50_users_at_a_time_in_the_order_they_joined(app, alice):
    others = [f"u{i:03d}" for i in range(1, 120)]
    add_users(app, *others)
    everyone = ["alice", *others]

    first = alice.get("/users/")
    assert first.status_code == 200
    assert user_names(first) == everyone[:50]
    assert link(first, "next") == "/users/?page=2"
    assert link(first, "prev") is None

    second = alice.get("/users/?page=2")
    assert user_names(second) == everyone[50:100]
    assert link(second, "prev") == "/users/?page=1"

    last = alice.get("/users/?page=3")
    assert user_names(last) == everyone[100:]
    assert link(last, "next") is None


def test_page_past_the_last_user_is_an_empty_page(alice):
    response = alice.get("/users/?page=7")
    assert response.status_code == 200
    assert user_names(response) == []


@pytest.mark.parametrize("page", ["0", "-1", "abc", "", "2.0", "99999999999999999999999"])
def test_bad_page_parameter_is_400_not_500(alice, page):
    assert alice.get(f"/users/?page={page}").status_code == 400


def test_users_list_shows_follow_or_unfollow_as_the_current_state_is(app, alice):
    add_users(app, "bob", "carol")
    alice.post("/users/bob/follow")
    actions = form_actions(alice.get("/users/"))
    assert "/users/bob/unfollow" in actions and "/users/bob/follow" not in actions
    assert "/users/carol/follow" in actions and "/users/carol/unfollow" not in actions
    assert not any(a.startswith("/users/alice/") for a in actions)  # no button to follow oneself


# --- profiles ---------------------------------------------------------------


def test_profile_shows_that_users_tweets_newest_first_and_nobody_elses(app, alice):
    bob_id, carol_id = add_users(app, "bob", "carol")
    add_tweets(app, bob_id, "bob one")
    add_tweets(app, carol_id, "carol's")
    add_tweets(app, bob_id, "bob two")
    response = alice.get("/users/bob/")
    assert response.status_code == 200
    assert "@bob" in text_of(response)
    assert tweet_texts(response) == ["bob two", "bob one"]


def test_profile_carries_a_follow_button_that_becomes_unfollow(app, alice):
    add_users(app, "bob")
    assert "/users/bob/follow" in form_actions(alice.get("/users/bob/"))
    alice.post("/users/bob/follow")
    actions = form_actions(alice.get("/users/bob/"))
    assert "/users/bob/unfollow" in actions and "/users/bob/follow" not in actions


def test_own_profile_has_no_follow_button(alice):
    actions = form_actions(alice.get("/users/alice/"))
    assert "/users/alice/follow" not in actions and "/users/alice/unfollow" not in actions


def test_profile_pages_50_tweets_at_a_time_with_an_older_link(app, alice):
    (bob_id,) = add_users(app, "bob")
    ids = add_tweets(app, bob_id, *[f"bob {i}" for i in range(70)])
    first = alice.get("/users/bob/")
    assert tweet_texts(first) == [f"bob {i}" for i in reversed(range(20, 70))]
    assert link(first, "next") == f"/users/bob/?before={ids[20]}"
    second = alice.get(link(first, "next"))
    assert tweet_texts(second) == [f"bob {i}" for i in reversed(range(20))]
    assert link(second, "next") is None


@pytest.mark.parametrize("before", ["abc", "0", "99999999999999999999999"])
def test_bad_before_parameter_on_a_profile_is_400_not_500(app, alice, before):
    assert alice.get(f"/users/alice/?before={before}").status_code == 400


def test_logged_out_visitor_reads_a_profile_without_buttons(app, client):
    (bob_id,) = add_users(app, "bob")
    add_tweets(app, bob_id, "public")
    response = client.get("/users/bob/")
    assert response.status_code == 200
    assert tweet_texts(response) == ["public"]
    assert form_actions(response) == []


def test_unknown_user_profile_is_a_404_page(alice):
    response = alice.get("/users/nobody/")
    assert response.status_code == 404
    assert "There is no user named &#39;nobody&#39;." in text_of(response)


# --- following --------------------------------------------------------------


def test_follow_stores_the_pair_and_redirects_303_to_the_profile(app, alice):
    add_users(app, "bob")
    response = alice.post("/users/bob/follow")
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/bob/"
    assert follows(app) == {("alice", "bob")}


def test_following_twice_is_the_same_as_once(app, alice):
    add_users(app, "bob")
    for _ in range(2):
        assert alice.post("/users/bob/follow").status_code == 303
    assert follows(app) == {("alice", "bob")}


def test_unfollow_removes_the_pair_and_redirects_303_to_the_profile(app, alice):
    add_users(app, "bob", "carol")
    alice.post("/users/bob/follow")
    alice.post("/users/carol/follow")
    response = alice.post("/users/bob/unfollow")
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/bob/"
    assert follows(app) == {("alice", "carol")}


def test_unfollowing_twice_or_someone_not_followed_is_harmless(app, alice):
    add_users(app, "bob")
    alice.post("/users/bob/follow")
    for _ in range(3):
        assert alice.post("/users/bob/unfollow").status_code == 303
    assert follows(app) == set()


def test_following_oneself_is_400_with_a_message_and_stores_nothing(app, alice):
    response = alice.post("/users/alice/follow")
    assert response.status_code == 400
    assert "You cannot follow yourself." in text_of(response)
    assert follows(app) == set()


@pytest.mark.parametrize("verb", ["follow", "unfollow"])
def test_following_or_unfollowing_an_unknown_name_is_404(app, alice, verb):
    assert alice.post(f"/users/nobody/{verb}").status_code == 404
    assert follows(app) == set()


def test_follow_by_name_ignores_its_case(app, alice):
    add_users(app, "Bob")
    response = alice.post("/users/bob/follow")
    assert response.headers["Location"] == "/users/Bob/"
    assert follows(app) == {("alice", "Bob")}


@pytest.mark.parametrize("verb", ["follow", "unfollow"])
def test_follow_buttons_send_back_to_the_page_they_were_on(app, alice, verb):
    add_users(app, "bob")
    response = alice.post(f"/users/bob/{verb}", {"next": "/users/?page=1"}, page="/users/?page=1")
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/?page=1"


@pytest.mark.parametrize("verb", ["follow", "unfollow"])
@pytest.mark.parametrize("unsafe", UNSAFE_NEXT)
def test_follow_buttons_never_redirect_off_the_site(app, alice, verb, unsafe):
    add_users(app, "bob")
    response = alice.post(f"/users/bob/{verb}", {"next": unsafe})
    assert response.status_code == 303
    assert response.headers["Location"] == "/users/bob/"


def test_buttons_of_a_page_point_back_to_it(app, alice):
    add_users(app, "bob")
    assert 'name="next" value="/users/?page=1"' in text_of(alice.get("/users/?page=1"))


def test_follow_without_csrf_token_is_400_and_stores_nothing(app, alice):
    add_users(app, "bob")
    assert alice.client.post("/users/bob/follow").status_code == 400
    assert follows(app) == set()


def test_unfollow_without_csrf_token_is_400_and_keeps_the_pair(app, alice):
    add_users(app, "bob")
    alice.post("/users/bob/follow")
    assert alice.client.post("/users/bob/unfollow").status_code == 400
    assert follows(app) == {("alice", "bob")}


def test_follow_then_timeline_shows_their_tweets_and_unfollow_hides_them(app, alice):
    bob = sign_up(app, "bob")
    bob.post("/tweets/", {"tweet": "bob's news"})
    alice.post("/users/bob/follow")
    assert tweet_texts(alice.get("/tweets/")) == ["bob's news"]
    alice.post("/users/bob/unfollow")
    assert tweet_texts(alice.get("/tweets/")) == []
    assert user_id(app, "bob") is not None
