"""End to end in a real browser: Debian's chromium, driven by Playwright, against
stage 0 (``run.py``) started by the stage runner on a free port of 127.0.0.1
over a freshly seeded database; and what people expect of a profile (counts,
lists, search, mentions, the tweet box, times) through nginx and uWSGI, on the
default stage (6, SQLite) and stage 7 (PostgreSQL and Redis, two nodes).

Never skipped: if chromium or Playwright is missing, the test fails and says why.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from helpers.postgres import fresh_database

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
PROFILE_SCREENSHOT = "/tmp/tweepy-profile-stage{}.png"
SEEDED = ["--users", "12", "--tweets", "40", "--follows", "2"]
SEED_PASSWORD = "tweepy123"
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


@pytest.fixture(scope="module", params=[6, 7], ids=["stage 6", "stage 7"])
def stack(request, tmp_path_factory):
    """A stage served by nginx and uWSGI on a free port: 6 on SQLite, 7 on a fresh PostgreSQL database and Redis."""
    tmp = tmp_path_factory.mktemp(f"stack{request.param}")
    env = {"TWEEPY_INSTANCE_PATH": str(tmp / "instance"), "TWEEPY_BCRYPT_LOG_ROUNDS": "4"}
    stage = stages.get_stage(request.param)
    if request.param == 6:
        env["TWEEPY_DATABASE_URL"] = f"sqlite:///{tmp / 'tweepy.sqlite3'}"
        with stages.start(stage, port=stages.free_port(), var=tmp / "var", env=env, seed=SEEDED) as live:
            yield live
        return
    with fresh_database("browser") as database:
        env["TWEEPY_DATABASE_URL"] = database
        env["TWEEPY_CACHE_KEY_PREFIX"] = f"tweepy-test-{uuid.uuid4().hex[:8]}:"
        with stages.start(stage, port=stages.free_port(), var=tmp / "var", env=env, seed=SEEDED) as live:
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


def open_page(chromium, server):
    """A new browser context's page on ``server``; yields it, then checks the server never answered 5xx."""
    context = chromium.new_context(base_url=server.url.rstrip("/"), viewport={"width": 1000, "height": 800})
    page = context.new_page()
    # Bounded: a missing element fails in seconds, not after pytest's patience runs out.
    page.set_default_timeout(10_000)
    server_errors = []
    page.on("response", lambda response: response.status >= 500 and server_errors.append(response.url))
    yield page
    context.close()
    assert not server_errors, f"the server answered 5xx to {server_errors}; its output:\n{server.log_tail()}"


@pytest.fixture
def page(chromium, server):
    yield from open_page(chromium, server)


@pytest.fixture
def people(chromium, stack):
    """Opens a page for each person on the stack; at the end each is checked for 5xx answers."""
    opened = []

    def person():
        pages = open_page(chromium, stack)
        opened.append(pages)
        return next(pages)

    yield person
    for pages in opened:
        next(pages, None)


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


def register(page, name: str, password: str = "a long secret") -> None:
    page.goto("/register/")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Email").fill(f"{name}@example.com")
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_label("Repeat the password").fill(password)
    page.get_by_role("button", name="Register").click()
    page.wait_for_url(re.compile(r"/tweets/$"))


def log_in(page, name: str, password: str) -> None:
    page.goto("/")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/tweets/$"))


def test_tweet_box_counts_down_mentions_link_and_times_read_relative(people, stack):
    from playwright.sync_api import expect

    page = people()
    name = f"mia_{stack.stage.number}"
    register(page, name)

    box = page.get_by_label("What's happening?")
    expect(page.get_by_text("280 characters left")).to_be_visible()
    box.fill("hi @user2 and @nobody_at_all")
    expect(page.get_by_text("252 characters left")).to_be_visible()
    box.fill("é" * 279 + "\n")  # trimmed as the server trims
    expect(page.get_by_text("1 character left")).to_be_visible()
    box.fill("hi @user2 and @nobody_at_all")
    page.get_by_role("button", name="Tweet").click()

    mine = page.locator(".tweet").filter(has_text="hi @user2")
    time = mine.locator("time")
    expect(time).to_have_text("now")
    expect(time).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$"))
    expect(time).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z$"))
    mine.get_by_role("link", name="@user2", exact=True).click()
    expect(page.get_by_role("heading", name="@user2")).to_be_visible()
    # The seeded tweets are a year old or so: shown by their date.
    expect(page.locator(".tweet time").first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d$"))


def test_profile_counts_follows_you_lists_and_search(people, stack):
    from playwright.sync_api import expect

    me, them = people(), people()
    name = f"zoe_{stack.stage.number}"
    register(me, name)
    log_in(them, "user3", SEED_PASSWORD)

    # user3 follows the newcomer from the profile: it counts one follower and says so.
    them.goto(f"/users/{name}/")
    expect(them.locator(".counts")).to_contain_text("0 followers")
    them.get_by_role("button", name="Follow").click()
    expect(them.locator(".counts")).to_contain_text("1 follower")
    me.goto("/users/user3/")
    expect(me.get_by_text("Follows you")).to_be_visible()
    counts = me.locator(".counts")
    following = int(re.search(r"(\d+) following", counts.inner_text()).group(1))
    followers = int(re.search(r"(\d+) followers?", counts.inner_text()).group(1))
    expect(counts).to_contain_text(re.compile(r"\d+ tweets?"))

    # Following them back adds one to their followers, and the list shows who.
    me.locator(".profile").get_by_role("button", name="Follow").click()
    expect(counts).to_contain_text(f"{followers + 1} follower")
    me.screenshot(path=PROFILE_SCREENSHOT.format(stack.stage.number), full_page=True)
    counts.get_by_role("link", name=re.compile("followers?$")).click()
    expect(me.get_by_role("heading", name="Followers of @user3")).to_be_visible()
    row = me.get_by_role("listitem").filter(has=me.get_by_role("link", name=f"@{name}", exact=True))
    expect(row.get_by_text("that's you")).to_be_visible()
    me.get_by_role("link", name="← @user3").click()
    me.locator(".counts").get_by_role("link", name=re.compile("following$")).click()
    expect(me.get_by_role("heading", name="Followed by @user3")).to_be_visible()
    expect(me.locator(".users li")).to_have_count(following)  # the newcomer among them, with buttons for the rest
    expect(me.get_by_role("listitem").filter(has_text=f"@{name}")).to_contain_text("that's you")
    expect(me.locator(".users li").get_by_role("button")).to_have_count(following - 1)

    # Finding someone: by a prefix, whatever its case.
    me.get_by_role("navigation").get_by_role("link", name="Users").click()
    me.get_by_role("searchbox", name="Find someone").fill("USER1")
    me.get_by_role("button", name="Search").click()
    expect(me).to_have_url(re.compile(r"/users/\?q=USER1$"))
    found = me.locator(".users li a")
    expect(found).to_have_text(["@user1", "@user10", "@user11", "@user12"])
    me.get_by_role("searchbox", name="Find someone").fill("nobody%")
    me.get_by_role("button", name="Search").click()
    expect(me.get_by_text("Nobody’s name starts with that.")).to_be_visible()
