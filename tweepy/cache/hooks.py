"""``init_app``: the backend ``CACHE`` names, and the request hooks that keep it fresh.

Before each request the backend catches up with other processes' writes (``begin_request``); after
it, a writer's session remembers how far its own writes reached, so its next request, whichever
process serves it, replays at least that far first. See docs/caching.md.
"""

from __future__ import annotations

from flask import Flask, g, session

from ..db_tuning import reads_autocommit
from .backend import NoCache, ReadCache
from .local import LocalCache
from .near import NearCache
from .redis_cache import RedisCache
from .write_signal import WriteSignal

# Where a writer's session keeps the last log id its writes reached.
SESSION_KEY = "seen_write"


def backend_for(config) -> ReadCache:
    """The read cache the settings ask for."""
    # A statement sent outside a transaction commits by itself only where reads autocommit.
    alone = bool(config["DB_ONE_STATEMENT_WRITES"]) and reads_autocommit(config)
    if config["CACHE"] == "local":
        signal = WriteSignal.beside(config["DATABASE_URL"]) if config["CACHE_WRITE_SIGNAL"] else None
        return LocalCache(
            config["CACHE_BYTES"],
            config["CACHE_TTL"],
            config["CACHE_SYNC_INTERVAL"],
            signal,
            changes_commit_alone=alone,
        )
    if config["CACHE"] == "redis":
        shared = RedisCache(
            config["CACHE_URL"],
            config["CACHE_KEY_PREFIX"],
            config["CACHE_TTL"],
            config["CACHE_TIMEOUT_S"],
            config["CACHE_SYNC_INTERVAL"],
            log_replayed=config["CACHE_NEAR"],
        )
        if config["CACHE_NEAR"]:
            return NearCache(
                shared,
                config["CACHE_BYTES"],
                config["CACHE_TTL"],
                config["CACHE_SYNC_INTERVAL"],
                sessions_near=config["CACHE_NEAR_SESSIONS"],
                changes_commit_alone=alone,
            )
        return shared
    return NoCache()


def init_app(app: Flask) -> None:
    backend = backend_for(app.config)
    app.extensions["tweepy_cache"] = backend
    if not backend.enabled:
        return

    @app.before_request
    def catch_up_with_other_processes() -> None:
        backend.begin_request(session.get(SESSION_KEY))

    @app.after_request
    def remember_own_writes(response):
        # The writer's next request, wherever it lands, replays up to here first (a signal
        # already makes every process do so).
        if backend.fresh_everywhere:
            return response
        if "tweepy_cache" in g and g.tweepy_cache.committed_up_to is not None:
            session[SESSION_KEY] = g.tweepy_cache.committed_up_to
        return response
