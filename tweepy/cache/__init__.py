"""The read cache: reads kept under keys they name, and writes that forget them.

A read in ``queries.py`` is cached with ``@memoized("name")``; a write in ``writes.py`` calls
``forget(read.key(...))`` inside its own transaction, or is one ``change`` naming the keys it makes
stale. ``CACHE`` chooses the backend: ``none`` (``NoCache``), ``local`` (``local.py``, with
``log.py`` and ``write_signal.py``) or ``redis`` (``redis_cache.py``, with ``near.py`` in front of it under
``CACHE_NEAR``); ``hooks.py`` sets it up.
Why no backend serves a stale entry: docs/caching.md.
"""

from .backend import CacheKey, NoCache, Patch, ReadCache, RequestState, cache, request_state
from .codec import row_type
from .hooks import SESSION_KEY, init_app
from .keys import READS, CachedRead, change, forget, memoized
from .local import LocalCache
from .log import prune_log
from .near import NearCache
from .redis_cache import CLAIM_TTL_MS, RedisCache
from .write_signal import WriteSignal

__all__ = [
    "CLAIM_TTL_MS",
    "READS",
    "SESSION_KEY",
    "CacheKey",
    "CachedRead",
    "LocalCache",
    "NearCache",
    "NoCache",
    "Patch",
    "ReadCache",
    "RedisCache",
    "RequestState",
    "WriteSignal",
    "cache",
    "change",
    "forget",
    "init_app",
    "memoized",
    "prune_log",
    "request_state",
    "row_type",
]
