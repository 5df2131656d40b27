"""What belongs to no feature: the health check, and the one place refusals become HTTP statuses."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template, request, url_for
from flask_wtf.csrf import CSRFError
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from . import errors
from .extensions import db
from .signing import page_token

bp = Blueprint("site", __name__)


# The pages every page links to, by endpoint: worked out once per mount point, not once a page.
LINKED = {
    "timeline": ("tweets.timeline", {}),
    "post": ("tweets.post", {}),
    "users": ("users.index", {}),
    "login": ("auth.login", {}),
    "logout": ("auth.logout", {}),
    "logout_everywhere": ("auth.logout_everywhere", {}),
    "register": ("auth.register", {}),
    "stylesheet": ("static", {"filename": "style.css"}),
    "script": ("static", {"filename": "tweepy.js"}),
}


def links() -> dict[str, str]:
    known = current_app.extensions.setdefault("tweepy_links", {})
    if request.script_root not in known:
        known[request.script_root] = {name: url_for(endpoint, **values) for name, (endpoint, values) in LINKED.items()}
    return known[request.script_root]


def here() -> str:
    """Where the buttons of this page (follow, delete) send people back to."""
    return request.full_path.rstrip("?")


@bp.app_context_processor
def page_helpers() -> dict:
    known = links()
    return {
        "here": here(),
        # Worked out once a page, not once a button: a page can hold fifty.
        "csrf": page_token(),
        "links": known,
        "profiles": known["users"],
    }


# Sent with every answer of the app (nginx adds the same to static files): no sniffing of
# content types, no framing by other sites (the one-click buttons), no full URLs leaked
# to other sites, and nothing but this site's own files on a page (no inline script).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
    ),
}


# Over https, browsers are told to come back over https only, for a year.
STRICT_TRANSPORT = {"Strict-Transport-Security": "max-age=31536000"}


@bp.after_app_request
def add_security_headers(response):
    response.headers.extend(SECURITY_HEADERS)
    if request.is_secure:
        response.headers.extend(STRICT_TRANSPORT)
    return response


@bp.get("/healthz")
def healthz():
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError:
        return "database unavailable\n", 503, {"Content-Type": "text/plain"}
    return "ok\n", 200, {"Content-Type": "text/plain"}


@bp.app_errorhandler(CSRFError)
def csrf_failed(error: CSRFError):
    reason = f"{error.description} Reload the page and try again."
    return render_template("error.html", code=400, title="Form expired", reason=reason), 400


# What each kind of refusal is called in HTTP; the first that matches wins.
STATUS_OF_REFUSAL: dict[type[errors.Refused], int] = {
    errors.Busy: 503,
    errors.Invalid: 400,
    errors.NotAllowed: 403,
    errors.NotFound: 404,
    errors.Taken: 409,
    errors.TooMany: 429,
}


def status_of(refusal: errors.Refused) -> int:
    return next((code for kind, code in STATUS_OF_REFUSAL.items() if isinstance(refusal, kind)), 400)


@bp.app_errorhandler(errors.Refused)
def refused(refusal: errors.Refused):
    code = status_of(refusal)
    page = render_template("error.html", code=code, title=HTTP_STATUS_CODES[code], reason=str(refusal))
    return page, code, retry_after(refusal)


def retry_after(refusal: errors.Refused) -> dict[str, str]:
    return {"Retry-After": str(refusal.retry_after)} if isinstance(refusal, errors.TooMany) else {}


@bp.app_errorhandler(OperationalError)
def database_busy(error: OperationalError):
    # SQLite's writers queue for busy_timeout; one that waited that long gets "try again", not a 500.
    if "database is locked" not in str(error.orig):
        raise error
    return busy("The site is busy writing. Nothing was saved: try again in a moment.")


@bp.app_errorhandler(PoolTimeout)
def no_connection_free(error: PoolTimeout):
    # Every connection of the process's pool stayed taken for DB_POOL_TIMEOUT: "try again", not a 500.
    return busy("The site is busy. Try again in a moment.")


def busy(reason: str):
    try:
        page = render_template("error.html", code=503, title="Busy", reason=reason)
    except SQLAlchemyError:
        # The page's header asks who is logged in, which may wait on the same lock or pool.
        page = f"503 Busy: {reason}\n"
    return page, 503, {"Retry-After": "1"}


@bp.app_errorhandler(HTTPException)
def http_error(error: HTTPException):
    # Keep the exception's headers (Allow on a 405, for one) but render our own page.
    headers = [(k, v) for k, v in error.get_headers() if k.lower() != "content-type"]
    page = render_template("error.html", code=error.code, title=error.name, reason=error.description)
    return page, error.code, headers
