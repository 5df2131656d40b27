"""Why the app refuses a request, in its own words.

Lower layers (``writes.py``, ``passwords.py``) raise these and know nothing of
HTTP; ``site.py`` maps each kind to a status code and renders the reason.
"""

from __future__ import annotations


class Refused(Exception):
    """A request the app will not carry out; ``str(error)`` is the reason shown to the person."""


class Invalid(Refused):
    """The request makes no sense (following oneself, say)."""


class NotAllowed(Refused):
    """The request is someone else's to make (deleting their tweet, say)."""


class NotFound(Refused):
    """What the request names does not exist."""


class TooMany(Refused):
    """Too many attempts lately (failed logins, registrations); ``retry_after`` says for how long, in seconds."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class Busy(TooMany):
    """Too much to do right now (passwords waiting to be hashed); try again in ``retry_after`` seconds."""


class Taken(Refused):
    """A name or email that belongs to someone else already."""

    def __init__(self, field: str) -> None:
        super().__init__(f"That {field} was just taken.")
        self.field = field
