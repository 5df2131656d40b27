"""Several processes of one app, and one small world of people writing to it, for the cache tests.

Two app objects on one database stand in for two processes (or two nodes): each has its
own in-process cache, while one person's browser keeps one session cookie whichever of
them the load balancer hands each request to.
"""

from __future__ import annotations

from .browser import Browser, sign_up
from .pages import tweet_ids


class OnePersonsBrowser:
    """One browser, one cookie jar, its requests spread over several processes."""

    def __init__(self, *apps):
        self.browsers = [Browser(app.test_client()) for app in apps]
        self.last = self.browsers[0]

    def on(self, process: int) -> Browser:
        """The browser as the given process sees it: carrying the session cookie the last one set."""
        browser = self.browsers[process]
        if browser is not self.last:
            cookie = self.last.client.get_cookie("session")
            if cookie is None:
                browser.client.delete_cookie("session")
            else:
                browser.client.set_cookie("session", cookie.value)
            self.last = browser
        return browser


def warm(browser: Browser, path: str):
    """Read a page until its process serves it from the cache (its first request replays the log first)."""
    browser.get(path)
    return browser.get(path)


PAGES = ["/tweets/", "/users/", "/users/alice/", "/users/bob/", "/users/carol/"]


def each_write_of_a_small_world(app):
    """alice, bob and carol sign up on ``app`` and write; yields once before their writes and after each."""
    alice, bob, carol = sign_up(app, "alice"), sign_up(app, "bob"), sign_up(app, "carol")
    people = {"alice": alice, "bob": bob}
    for browser in people.values():
        browser.get("/tweets/")  # the welcome message is shown once, on whichever page comes first

    def post(who, url, data=None):
        return lambda: who.post(url, data)

    def delete_newest_of_bob():
        return bob.post(f"/tweets/{tweet_ids(bob.get('/users/bob/'))[0]}/delete")

    yield people
    for write in [
        post(bob, "/tweets/", {"tweet": "bob 1"}),
        post(carol, "/tweets/", {"tweet": "carol 1"}),
        post(alice, "/tweets/", {"tweet": "alice 1"}),
        post(alice, "/users/bob/follow"),
        post(alice, "/users/carol/follow"),
        lambda: sign_up(app, "dave").post("/tweets/", {"tweet": "dave 1"}),
        post(bob, "/tweets/", {"tweet": "bob 2"}),
        post(bob, "/tweets/", {"tweet": "bob oops"}),
        delete_newest_of_bob,
        post(alice, "/users/carol/unfollow"),
        post(carol, "/users/alice/follow"),
        post(bob, "/users/alice/follow"),
    ]:
        assert write().status_code == 303
        yield people
