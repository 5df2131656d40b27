"""tweepy: a mini-Twitter on Flask, and the app a scaling workshop measures.

``create_app`` builds the application in small named steps; everything it
needs to know comes from ``config.py`` (environment) and ``overrides``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from . import cache, cli, config, db_tuning, devices, fragments, passwords, queries, signing, throttle
from .extensions import bcrypt, csrf, db, login_manager, migrate

# Hooks, views and handlers whose answer to "is it a coroutine function?" is kept (there are a dozen).
SYNC_ANSWERS_KEPT = 1000


class Tweepy(Flask):
    """Flask, asking once per hook or view whether it must be run as a coroutine, not on every call.

    Flask passes every view and hook through ``ensure_sync`` each time it calls one, and its answer for
    a plain function is that function, so the answer is kept (tests/test_site.py fails if an upgrade of
    Flask changes either)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sync_answers: dict[Callable, Callable] = {}

    def ensure_sync(self, func: Callable) -> Callable:
        try:
            return self.sync_answers[func]
        except KeyError:
            answer = super().ensure_sync(func)
            if len(self.sync_answers) < SYNC_ANSWERS_KEPT:
                self.sync_answers[func] = answer
            return answer
        except TypeError:  # a callable that cannot be a key: asked every time, as Flask does
            return super().ensure_sync(func)


def create_app(overrides: dict[str, Any] | None = None) -> Flask:
    app = Tweepy(__name__, instance_path=config.read("INSTANCE_PATH", overrides) or None)
    # Owner-only: the instance folder holds the secret key and the SQLite database.
    os.makedirs(app.instance_path, mode=0o700, exist_ok=True)
    app.config.update(config.load(app.instance_path, overrides))
    register_database(app)
    signing.init_app(app)
    register_extensions(app)
    passwords.init_app(app)
    cache.init_app(app)
    queries.init_app(app)
    throttle.init_app(app)
    devices.init_app(app)
    fragments.init_app(app)
    register_blueprints(app)
    register_worker_header(app)
    register_proxies(app)
    cli.init_app(app)
    log_settings(app)
    return app


def register_database(app: Flask) -> None:
    app.config["SQLALCHEMY_DATABASE_URI"] = app.config["DATABASE_URL"]
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = db_tuning.engine_options(app.config)
    db.init_app(app)
    migrate.init_app(app, db, directory=os.path.join(os.path.dirname(app.root_path), "migrations"))
    with app.app_context():
        db_tuning.init_app(app, db.engine)


def register_extensions(app: Flask) -> None:
    bcrypt.init_app(app)
    csrf.init_app(app)
    login_manager.init_app(app)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Log in to see that page."


def register_blueprints(app: Flask) -> None:
    from . import auth, site, tweets, users

    for blueprint in (auth.bp, tweets.bp, users.bp, site.bp):
        app.register_blueprint(blueprint)


def register_worker_header(app: Flask) -> None:
    """With WORKER_HEADER, every answer names the process that made it (for tests of several processes)."""
    if not app.config["WORKER_HEADER"]:
        return
    worker = f"{socket.gethostname()}:{os.getpid()}"

    @app.after_request
    def name_the_worker(response):
        response.headers["X-Tweepy-Worker"] = worker
        return response


def register_proxies(app: Flask) -> None:
    """Behind a TLS front: the client's address and scheme as the front saw them, from the headers of
    exactly the proxies trusted (anyone can send these headers; only the last N were set by ours)."""
    trusted = app.config["TRUSTED_PROXIES"]
    if trusted:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=trusted, x_proto=trusted)


def log_settings(app: Flask) -> None:
    """Record what is live, so every benchmark run says which settings it measured (in the server's log)."""
    app.logger.setLevel(logging.INFO)
    shown = config.shown(app.config)
    app.logger.info("tweepy settings: %s", " ".join(f"{k}={v}" for k, v in shown.items()))
