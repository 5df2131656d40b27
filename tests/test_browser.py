"""End to end in a real browser: Debian's chromium, driven by Playwright, against
stage 0 (``run.py``) started by the stage runner on a free port of 127.0.0.1
over a freshly seeded database.

Never skipped: if chromium or Playwright is missing, the test fails and says why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools import stages

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
# Flags for a root user on a machine without network: no sandbox, no GPU, no calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMELINE_SCREENSHOT = Path("/tmp/tweepy-timeline.png")
# A seeded user with tweets (the seed is deterministic); the new user follows them.
FRIEND = "user2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Stage 0 (run.py) on a free port, over a database migrated and seeded by the real CLI."""
    tmp = tmp_path_factory.mktemp("live")
    env = {
        "TWEEPY_DATABASE_URL": f"sqlite:///{tmp / 'tweepy.sqlite3'}",
        "TWEEPY_INSTANCE_PATH": str(tmp / "instance"),
        # Only to keep the test fast; the app's default cost is 12.
        "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
    }
    seed = ["--users", "5", "--tweets", "20", "--follows", "2"]
    with stages.start(stages.get_stage(0), port=stages.free_port(), var=tmp / "var", env=env, seed=seed) as live:
        yield live


@pytest.fixture(scope="module")
def chromium():
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as error:
        pytest.fail(
            f"Playwright for Python is not installed ({error}); run `make test`, which installs requirements/test.txt",
            pytrace=False,
        )
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install chromium`", pytrace=False)
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except Error as error:
            pytest.fail(f"chromium ({CHROMIUM}) could not start:\n{error}", pytrace=False)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, server):
    context = chromium.new_context(base_url=server.url.rstrip("/"), viewport={"width": 1000, "height": 800})
    page = context.new_page()
    # Bounded: a missing element fails in seconds, not after pytest's patience runs out.
    page.set_default_timeout(10_000)
    server_errors = []
    page.on("response", lambda response: response.status >= 500 and server_errors.append(response.url))
    yield page
    context.close()
    assert not server_errors, f"the server answered 5xx to {server_errors}; its output:\n{server.log_tail()}"


def test_new_user_registers_logs_in_posts_follows_reads_timeline_and_logs_out(page):
    from playwright.sync_api import expect

    name, password = "ada_browser", "a long secret"
    nav = page.get_by_role("navigation")
    tweets = page.get_by_role("list").filter(has=page.locator(".tweet"))

    def tweet_by(author):
        return page.get_by_role("listitem").filter(has=page.get_by_role("link", name=f"@{author}", exact=True))

    # Register: straight onto the timeline, welcomed and logged in.
    page.goto("/")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    nav.get_by_role("link", name="Register").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Email").fill(f"{name}@example.com")
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_label("Repeat the password").fill(password)
    page.get_by_role("button", name="Register").click()
    expect(page).to_have_url(re.compile(r"/tweets/$"))
    expect(page.get_by_text(f"Welcome to tweepy, {name}!")).to_be_visible()
    expect(nav.get_by_role("link", name=f"@{name}")).to_be_visible()

    # Log out, then back in with the new password.
    nav.get_by_role("button", name="Log out", exact=True).click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/tweets/$"))
    expect(page.get_by_role("heading", name="Your timeline")).to_be_visible()
    expect(page.get_by_text("Nothing here yet.")).to_be_visible()

    # Post a tweet; markup in it shows as text.
    mine = "Hello from a real browser <b>not bold</b>"
    page.get_by_label("What's happening?").fill(mine)
    page.get_by_role("button", name="Tweet").click()
    expect(tweet_by(name)).to_have_count(1)
    expect(tweet_by(name).get_by_text(mine, exact=True)).to_be_visible()
    expect(page.get_by_label("What's happening?")).to_have_value("")
    expect(tweet_by(FRIEND)).to_have_count(0)

    # Read the friend's newest tweet on their profile, reached from the users list.
    nav.get_by_role("link", name="Users").click()
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    page.get_by_role("link", name=f"@{FRIEND}", exact=True).click()
    expect(page.get_by_role("heading", name=f"@{FRIEND}")).to_be_visible()
    newest = tweet_by(FRIEND).first.locator(".text")
    expect(newest).to_be_visible()
    theirs = newest.inner_text()

    # Follow them from the users list; the button then offers to unfollow.
    nav.get_by_role("link", name="Users").click()
    friend_row = page.get_by_role("listitem").filter(has=page.get_by_role("link", name=f"@{FRIEND}", exact=True))
    friend_row.get_by_role("button", name="Follow").click()
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    expect(friend_row.get_by_role("button", name="Unfollow")).to_be_visible()

    # The timeline now holds their tweets after mine (mine is the newest).
    nav.get_by_role("link", name="Timeline").click()
    expect(tweet_by(FRIEND).first).to_contain_text(theirs)
    expect(tweets.get_by_role("listitem").first).to_contain_text(mine)
    page.screenshot(path=str(TIMELINE_SCREENSHOT), full_page=True)

    # Log out: back on the login page, and the timeline is closed again.
    nav.get_by_role("button", name="Log out", exact=True).click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(nav.get_by_role("button", name="Log out", exact=True)).to_have_count(0)
    page.goto("/tweets/")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(page.get_by_text("Log in to see that page.")).to_be_visible()
