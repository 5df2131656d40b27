"""Reading pages the way a person does (which tweets, which errors, which buttons),
and signing people up, each in a browser of their own."""

from __future__ import annotations

import html
import re

from conftest import Browser


def sign_up(app, name: str) -> Browser:
    """A new browser (test client) on ``app``, registered and logged in as ``name``."""
    browser = Browser(app.test_client())
    response = browser.register(name)
    assert response.status_code == 303, response.get_data(as_text=True)
    return browser


def text_of(response) -> str:
    return response.get_data(as_text=True)


def tweet_texts(response) -> list[str]:
    """The tweets a page shows, top to bottom, as the reader sees them (unescaped)."""
    return [html.unescape(t) for t in re.findall(r'<p class="text">(.*?)</p>', text_of(response), re.S)]


def tweet_ids(response) -> list[int]:
    return [int(i) for i in re.findall(r'<li class="tweet" id="tweet-(\d+)"', text_of(response))]


def errors(response) -> list[str]:
    return [html.unescape(e) for e in re.findall(r'<p class="error">(.*?)</p>', text_of(response), re.S)]


def form_actions(response) -> list[str]:
    """Where the page's POST forms (buttons included) send their data."""
    return re.findall(r'<form[^>]*method="post"[^>]*action="([^"]*)"', text_of(response))


def link(response, rel: str) -> str | None:
    """The href of the page's ``rel`` link (``next`` is "older tweets" or "next page")."""
    match = re.search(rf'<a href="([^"]*)" rel="{rel}">', text_of(response))
    return html.unescape(match.group(1)) if match else None


def user_names(response) -> list[str]:
    """The users the users list shows, in order."""
    return re.findall(r'<li>\s*<a href="/users/[^"]*/">@(\w+)</a>', text_of(response))


def without_csrf_tokens(response) -> str:
    """The page with its CSRF tokens blanked: they are signed with the time, the rest should not vary."""
    return re.sub(r'(name="csrf_token" type="hidden" value=")[^"]*"', r'\1"', text_of(response))
