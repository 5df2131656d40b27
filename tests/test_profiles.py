"""What a profile says of its user (counts, joined, follows you), the lists of
followers and following, and finding someone by a prefix of their name."""

from __future__ import annotations

import re

import pytest
from helpers.browser import sign_up
from helpers.pages import form_actions, link, profile_counts, text_of, tweet_ids, user_names
from helpers.stored import add_follow, add_tweets, add_users, user_row

# --- profiles ---------------------------------------------------------------


def test_profile_counts_tweets_followers_and_following(app, alice):
    bob_id, carol_id, dan_id = add_users(app, "bob", "carol", "dan")
    add_tweets(app, bob_id, "one", "two", "three")
    add_tweets(app, carol_id, "not bob's")
    for follower in (carol_id, dan_id):
        add_follow(app, follower, bob_id)
    add_follow(app, bob_id, carol_id)
    assert profile_counts(alice.get("/users/bob/")) == {"tweets": 3, "followers": 2, "following": 1}
    assert profile_counts(alice.get("/users/dan/")) == {"tweets": 0, "followers": 0, "following": 1}


def test_counts_change_as_people_post_delete_follow_and_unfollow(app, alice):
    bob = sign_up(app, "bob")
    bob.post("/tweets/", {"tweet": "hello"})
    alice.post("/users/bob/follow")
    assert profile_counts(alice.get("/users/bob/")) == {"tweets": 1, "followers": 1, "following": 0}
    assert profile_counts(alice.get("/users/alice/")) == {"tweets": 0, "followers": 0, "following": 1}
    alice.post("/users/bob/unfollow")
    (tweet,) = tweet_ids(bob.get("/tweets/"))
    bob.post(f"/tweets/{tweet}/delete")
    assert profile_counts(alice.get("/users/bob/")) == {"tweets": 0, "followers": 0, "following": 0}
    assert profile_counts(alice.get("/users/alice/")) == {"tweets": 0, "followers": 0, "following": 0}


def test_profile_says_when_they_joined_with_the_exact_time_in_utc(app, alice):
    joined = user_row(app, "alice").created
    page = text_of(alice.get("/users/alice/"))
    assert f'Joined <time datetime="{joined.isoformat()}Z"' in page
    assert f'title="{joined:%Y-%m-%d %H:%M} UTC"' in page


def test_profile_says_follows_you_only_when_they_do(app, alice):
    bob = sign_up(app, "bob")
    assert "Follows you" not in text_of(alice.get("/users/bob/"))
    bob.post("/users/alice/follow")
    assert "Follows you" in text_of(alice.get("/users/bob/"))
    assert "Follows you" not in text_of(bob.get("/users/alice/")), "alice does not follow bob"
    bob.post("/users/alice/unfollow")
    assert "Follows you" not in text_of(alice.get("/users/bob/"))


def test_counts_link_to_the_followers_and_following_lists(app, alice):
    add_users(app, "Bob")
    page = text_of(alice.get("/users/bob/"))
    assert '<a href="/users/Bob/followers/"><strong>0</strong> followers</a>' in page
    assert '<a href="/users/Bob/following/"><strong>0</strong> following</a>' in page


# --- followers and following ------------------------------------------------


def test_followers_and_following_list_the_right_people_with_follow_buttons(app, alice):
    bob_id, carol_id, dan_id = add_users(app, "bob", "carol", "dan")
    add_follow(app, carol_id, bob_id)
    add_follow(app, dan_id, bob_id)
    add_follow(app, bob_id, dan_id)
    alice.post("/users/dan/follow")

    followers = alice.get("/users/bob/followers/")
    assert followers.status_code == 200
    assert user_names(followers) == ["carol", "dan"]
    assert {"/users/carol/follow", "/users/dan/unfollow"} <= set(form_actions(followers))

    following = alice.get("/users/bob/following/")
    assert user_names(following) == ["dan"]
    assert "/users/dan/unfollow" in form_actions(following)


def test_an_empty_list_says_so(app, alice):
    add_users(app, "bob")
    assert "No followers yet." in text_of(alice.get("/users/bob/followers/"))
    assert "Not following anyone yet." in text_of(alice.get("/users/bob/following/"))


def test_followers_page_50_at_a_time_with_a_next_link(app, alice):
    (bob_id,) = add_users(app, "bob")
    fans = add_users(app, *[f"fan{i:03d}" for i in range(70)])
    for fan in fans:
        add_follow(app, fan, bob_id)
    first = alice.get("/users/bob/followers/")
    assert user_names(first) == [f"fan{i:03d}" for i in range(50)]
    assert link(first, "next") == f"/users/bob/followers/?after={fans[49]}"
    second = alice.get(link(first, "next"))
    assert user_names(second) == [f"fan{i:03d}" for i in range(50, 70)]
    assert link(second, "next") is None


def test_lists_are_public_like_profiles_and_unknown_names_are_404(app, client):
    (bob_id, carol_id) = add_users(app, "bob", "carol")
    add_follow(app, carol_id, bob_id)
    response = client.get("/users/bob/followers/")
    assert response.status_code == 200 and user_names(response) == ["carol"]
    assert form_actions(response) == []
    for listing in ("followers", "following"):
        assert client.get(f"/users/nobody/{listing}/").status_code == 404


@pytest.mark.parametrize("after", ["abc", "0", "-1", "1.5", "99999999999999999999999"])
def test_bad_after_parameter_on_a_list_is_400(app, alice, after):
    for listing in ("followers", "following"):
        assert alice.get(f"/users/alice/{listing}/?after={after}").status_code == 400


# --- finding someone --------------------------------------------------------


def test_users_page_has_a_search_box(alice):
    page = text_of(alice.get("/users/"))
    assert re.search(r'<form class="search" method="get" action="/users/"', page)
    assert '<input id="q" name="q" type="search" value=""' in page


def test_search_finds_names_starting_with_the_query_whatever_its_case(app, alice):
    add_users(app, "Bob", "bobby", "BOBCAT", "rob", "abob")
    response = alice.get("/users/?q=bOb")
    assert response.status_code == 200
    assert user_names(response) == ["Bob", "bobby", "BOBCAT"]
    assert 'value="bOb"' in text_of(response), "the box keeps the query"


def test_an_underscore_is_an_underscore_and_a_percent_sign_finds_nobody(app, alice):
    add_users(app, "a_b", "axb", "a_c")
    assert user_names(alice.get("/users/?q=a_")) == ["a_b", "a_c"]
    for query in ("a%", "%", "a%25", "*", "a b"):
        response = alice.get("/users/", query_string={"q": query})
        assert response.status_code == 200
        assert user_names(response) == []
        assert "Nobody’s name starts with that." in text_of(response)


def test_search_results_page_50_at_a_time_by_name(app, alice):
    add_users(app, *[f"zed{i:03d}" for i in reversed(range(70))])
    first = alice.get("/users/?q=zed")
    assert user_names(first) == [f"zed{i:03d}" for i in range(50)]
    assert link(first, "next") == "/users/?q=zed&after=zed049"
    second = alice.get(link(first, "next"))
    assert user_names(second) == [f"zed{i:03d}" for i in range(50, 70)]
    assert link(second, "next") is None


def test_an_empty_query_is_the_users_list(app, alice):
    add_users(app, "bob")
    assert user_names(alice.get("/users/?q=")) == user_names(alice.get("/users/")) == ["alice", "bob"]


@pytest.mark.parametrize("query", ["a" * 33, "x" * 5000, "\x00" * 40])
def test_a_query_longer_than_any_name_is_400(alice, query):
    assert alice.get("/users/", query_string={"q": query}).status_code == 400


@pytest.mark.parametrize("query", ["\x00", "b\x00", "\u212a", "é", "'; DROP TABLE users; --", "<script>"])
def test_a_query_of_any_content_is_a_page(app, alice, query):
    add_users(app, "bob")
    response = alice.get("/users/", query_string={"q": query})
    assert response.status_code == 200
    assert user_names(response) == []


@pytest.mark.parametrize("after", ["a", "not a name", "\x00", "x" * 40])
def test_a_bad_after_on_search_is_400(alice, after):
    assert alice.get("/users/", query_string={"q": "al", "after": after}).status_code == 400


def test_search_needs_a_login_as_the_users_list_does(client):
    response = client.get("/users/?q=al")
    assert response.status_code in (302, 303)
