"""Reading paging parameters from the query string: bad ones are a 400, never a 500."""

from __future__ import annotations

from flask import abort, request

# SQLite and PostgreSQL integers stop at 2**63 - 1; a bigger id cannot exist.
LARGEST_ID = 2**63 - 1
LARGEST_PAGE = 1_000_000


def _positive_int(name: str, largest: int) -> int | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= largest:
        abort(400, f"'{name}' must be a whole number from 1 to {largest}.")
    return int(raw)


def tweet_id_arg(name: str) -> int | None:
    return _positive_int(name, LARGEST_ID)


def page_arg() -> int:
    return _positive_int("page", LARGEST_PAGE) or 1
