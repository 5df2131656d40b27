"""What belongs to no feature: the health check, and the one place refusals become HTTP statuses."""

from __future__ import annotations

from flask import Blueprint, render_template, request, url_for
from flask_wtf.csrf import CSRFError, generate_csrf
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from . import errors
from .extensions import db

bp = Blueprint("site", __name__)


@bp.app_context_processor
def page_helpers() -> dict:
    return {
        # Where the buttons of this page (follow, delete) send people back to.
        "here": request.full_path.rstrip("?"),
        # Worked out once a page, not once a button: a page can hold fifty.
        "csrf": generate_csrf(),
        "profiles": url_for("users.index"),
    }


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
    errors.Invalid: 400,
    errors.NotAllowed: 403,
    errors.NotFound: 404,
    errors.Taken: 409,
}


def status_of(refusal: errors.Refused) -> int:
    return next((code for kind, code in STATUS_OF_REFUSAL.items() if isinstance(refusal, kind)), 400)


@bp.app_errorhandler(errors.Refused)
def refused(refusal: errors.Refused):
    code = status_of(refusal)
    return render_template("error.html", code=code, title=HTTP_STATUS_CODES[code], reason=str(refusal)), code


@bp.app_errorhandler(HTTPException)
def http_error(error: HTTPException):
    # Keep the exception's headers (Allow on a 405, for one) but render our own page.
    headers = [(k, v) for k, v in error.get_headers() if k.lower() != "content-type"]
    page = render_template("error.html", code=error.code, title=error.name, reason=error.description)
    return page, error.code, headers
