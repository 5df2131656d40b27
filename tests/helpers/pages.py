"""Reading pages the way a person does: which tweets, which errors, which buttons, which token.

Each reader takes a Flask test-client response, a ``requests`` response or the page's text.
"""

from __future__ import annotations

import html
import re

_CSRF_TOKEN = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


def text_of(response) -> str:
    if isinstance(response, str):
        return response
    if hasattr(response, "get_data"):
        return response.get_data(as_text=True)
    return response.text


def find_csrf_token(response) -> str | None:
    """The CSRF token of the page's first form, if it has one."""
    found = _CSRF_TOKEN.search(text_of(response))
    return html.unescape(found.group(1)) if found else None


def csrf_token(response) -> str:
    token = find_csrf_token(response)
    assert token, "the page has no CSRF token"
    return token


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


def forms_of(response) -> list[dict[str, str]]:
    """Each POST form of the page: its action, and the values of its hidden fields (unescaped)."""
    found = []
    for attributes, body in re.findall(r'<form([^>]*method="post"[^>]*)>(.*?)</form>', text_of(response), re.S):
        form = {"action": html.unescape(re.search(r'action="([^"]*)"', attributes).group(1))}
        for name, value in re.findall(r'<input name="([^"]+)" type="hidden" value="([^"]*)"', body):
            form[name] = html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', body):
            form[name] = html.unescape(value)
        found.append(form)
    return found


def link(response, rel: str) -> str | None:
    """The href of the page's ``rel`` link (``next`` is "older tweets" or "next page")."""
    match = re.search(rf'<a href="([^"]*)" rel="{rel}">', text_of(response))
    return html.unescape(match.group(1)) if match else None


def user_names(response) -> list[str]:
    """The users the users list shows, in order."""
    return re.findall(r'<li>\s*<a href="/users/[^"]*/">@(\w+)</a>', text_of(response))


def without_csrf_tokens(response) -> str:
    """The page with its CSRF tokens blanked: they are signed with the time, the rest should not vary."""
    return _CSRF_TOKEN.sub('name="csrf_token" type="hidden" value=""', text_of(response))


def profile_counts(response) -> dict[str, int]:
    """The counts a profile shows: tweets, followers and following."""
    found = re.findall(r"<strong>(\d+)</strong> (tweets?|followers?|following)\b", text_of(response))
    return {(kind if kind.endswith(("s", "following")) else kind + "s"): int(n) for n, kind in found}
