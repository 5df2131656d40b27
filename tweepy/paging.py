"""Reading paging parameters from the query string: bad ones are a 400, never a 500."""

from __future__ import annotations

from flask import abort, current_app, request

# SQLite and PostgreSQL integers stop at 2**63 - 1; a bigger id cannot exist.
LARGEST_ID = 2**63 - 1
LARGEST_PAGE = 1_000_000


def _positive_int(name: str, largest: int) -> int | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    # Its length is checked as text first: int() refuses more than 4,300 digits with a ValueError (a 500).
    digits = raw.lstrip("0") if raw.isascii() and raw.isdigit() else None
    if digits is None or len(digits) > len(str(largest)) or not 1 <= int(digits or "0") <= largest:
        abort(400, f"'{name}' must be a whole number from 1 to {largest}.")
    return int(digits)


def tweet_id_arg(name: str) -> int | None:
    return _positive_int(name, LARGEST_ID)


def user_id_arg(name: str) -> int:
    """Where a keyset page of users starts (after this id; 0, the start, when absent)."""
    return _positive_int(name, LARGEST_ID) or 0


def page_arg() -> int:
    return _positive_int("page", LARGEST_PAGE) or 1


def is_full(rows) -> bool:
    """A full page may have a next one (no COUNT: the next page may turn out empty)."""
    return len(rows) >= current_app.config["PAGE_SIZE"]


def older_tweets_url(tweets, page_url: str) -> str | None:
    """The link to the tweets after this page (at ``page_url``, no query), keyed by the last id shown."""
    return f"{page_url}?before={tweets[-1].id}" if is_full(tweets) else None
