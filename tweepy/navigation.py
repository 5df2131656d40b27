"""Where to send people after a form: only ever to a path on this site."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import redirect, url_for
from werkzeug.wrappers import Response


def is_local_path(target: str | None) -> bool:
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return False
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc and not any(ord(c) < 32 for c in target)


def go_back(target: str | None, fallback_endpoint: str, **values) -> Response:
    """303 to ``target`` when it is a local path, else to the fallback page."""
    return redirect(target if is_local_path(target) else url_for(fallback_endpoint, **values), code=303)
