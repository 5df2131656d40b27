"""``RedisCache`` (``CACHE=redis``): one cache in Redis for every process of every node.

Each entry is a hash under ``CACHE_KEY_PREFIX + key`` holding the value (JSON, ``codec.py``) and a
random *generation*; a value is stored only if its generation is unchanged since the miss read it,
and a write deletes the hashes it forgot once it commits. Evictions that Redis could not take are
owed, recorded in the ``cache_invalidations`` table and paid before Redis is trusted again. Why no
write leaves a stale entry however commits interleave: docs/caching.md.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from ..extensions import db
from ..models import CacheInvalidation
from . import codec
from .backend import CacheKey, ChangesThenForgets, Patch, request_state

if TYPE_CHECKING:
    from redis.commands.core import Script

# Keys a process may owe Redis in memory; past this it drops the whole prefix once Redis answers.
OWED_REMEMBERED = 10_000
# Owed evictions paid from the table per check (more wait for the next one).
OWED_PER_CHECK = 1000

log = logging.getLogger(__name__)

# How long the generation made by a miss lives, unless a value is stored with it. Short, because the key
# may be the client's choice (a name nobody has); a read that takes longer is served and not kept.
CLAIM_TTL_MS = 10_000
# A miss: the value if there is one (with its generation, and the log id it is stamped with), else the
# generation a store must still find (made if there is none).
VALUE_OR_GENERATION = """
local found = redis.call('HMGET', KEYS[1], 'value', 'generation', 'stamp')
if found[1] then return {1, found[1], found[2] or '', found[3] or '0'} end
if found[2] then return {0, found[2]} end
redis.call('HSET', KEYS[1], 'generation', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, ARGV[1]}
"""
# After a write: its own value, stamped with its log id, in place of whatever was kept (none given: only the
# delete). Under a near cache a value stamped before a later write is refused by whoever replayed that write,
# so none is served stale; the fresh generation refuses any store claimed before it.
REPLACE = """
redis.call('DEL', KEYS[1])
if ARGV[1] == '' then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'generation', ARGV[2], 'stamp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
# A store: only if no write evicted the key since its generation was read.
STORE_IF_UNCHANGED = """
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'stamp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class RedisCache(ChangesThenForgets):
    """One cache in Redis for every process of every node; docs/caching.md says why it stays fresh."""

    enabled = True
    # Every process reads the one copy, evicted as soon as a write commits.
    fresh_everywhere = True

    def __init__(
        self, url: str, prefix: str, ttl: float, timeout: float, sync_interval: float, log_replayed: bool = False
    ) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # One retry, at once: a pooled connection that a Redis restart closed is replaced, no more.
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1)
        )
        self.unreachable = (redis.ConnectionError, redis.TimeoutError, OSError)
        self.failed = (redis.RedisError, OSError)
        self.no_script = redis.exceptions.NoScriptError
        self.value_or_generation = self.client.register_script(VALUE_OR_GENERATION)
        self.store_if_unchanged = self.client.register_script(STORE_IF_UNCHANGED)
        self.replace_script = self.client.register_script(REPLACE)
        self.url, self.timeout, self.prefix = url, timeout, prefix
        self.ttl_ms = max(1, int(ttl * 1000))
        self.sync_interval = sync_interval
        # Until Redis is known to owe nothing (at start: a process that died may have left debts),
        # reads do not use it.
        self.trusted = False
        self.unreachable_until = 0.0
        self.checked_at = float("-inf")
        self.owed: set[str] = set()
        self.owe_everything = False
        self.lock = threading.Lock()
        # One thread or greenlet of the process pays debts at a time; the others carry on.
        self.paying = threading.Lock()
        # Under a near cache (``near.py``) every process replays the invalidation log and refuses a value
        # stamped before an eviction it replayed: an eviction Redis missed is then owed to no one, and the
        # table is the log, not a list of debts.
        self.log_replayed = log_replayed

    def begin_request(self, seen_write: int | None) -> None:
        # Writers evict before their response leaves: a request only has debts to pay.
        self.sync()

    def get_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return self.get_many_or_compute([key], lambda _: compute(), keep)[0]

    def get_many_or_compute(
        self,
        keys: list[CacheKey],
        compute: Callable[[int], Any],
        keep: Callable[[Any], bool],
        stamp: int = 0,
        wanted: list[int] | None = None,
    ) -> list[Any]:
        """One round trip for all the keys (and one more to store the misses worth keeping).

        A value computed here is stamped with ``stamp``: it shows every write logged up to that id. A value
        found stamped below ``wanted[i]`` may predate a write the caller knows of, and is computed again."""
        if not self.trusted:
            self.pay_debts()
            if not self.trusted:
                return [compute(i) for i in range(len(keys))]
        names = [self.prefix + key for key in keys]
        claims = [([name], [secrets.token_hex(8), CLAIM_TTL_MS]) for name in names]
        try:
            replies = self._run(self.value_or_generation, claims)
        except self.unreachable as error:
            self._lost(error)
            return [compute(i) for i in range(len(keys))]
        except self.failed as error:  # out of memory under maxmemory noeviction, say: served, nothing kept
            log.warning("read cache: Redis refused to read %s: %s", ", ".join(keys), error)
            return [compute(i) for i in range(len(keys))]
        values, stores = [], []
        # A value read inside a write that has not committed may show rows that roll back.
        storing = not request_state().forgotten
        for i, reply in enumerate(replies):
            found, value, generation = self._read(keys[i], reply, None if wanted is None else wanted[i])
            if found:
                values.append(value)
                continue
            value = compute(i)
            values.append(value)
            if storing and generation is not None and keep(value):
                try:
                    stores.append((names[i], generation, codec.encode(value), stamp))
                except TypeError as error:  # a read returning what the codec cannot write: served, not kept
                    log.warning("read cache: cannot keep %s: %s", keys[i], error)
        if stores:
            self._store(stores)
        return values

    def _read(self, key: CacheKey, reply: list, wanted: int | None) -> tuple[bool, Any, bytes | None]:
        """Whether Redis's reply holds a value worth serving, the value, and else the generation a store of
        the value computed instead must find (None: store nothing)."""
        if not reply[0]:
            return False, None, reply[1]
        if wanted is not None and int(reply[3]) < wanted:
            return False, None, reply[2]  # older than an eviction replayed here: read afresh, and replaced
        try:
            return True, codec.decode(reply[1]), None
        except (ValueError, RecursionError):  # not what this code writes (older code's, anyone's): read again
            log.warning("read cache: cannot read the entry of %s; dropping it", key)
            self.evict([key])
            return False, None, None

    def get_at_once_or_compute(self, key: CacheKey, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        return self.get_or_compute(key, compute, keep)

    def _store(self, stores: list[tuple[str, bytes, bytes, int]]) -> None:
        """Keep each (name, generation read, value, stamp), each only if its generation is unchanged."""
        calls = [([name], [generation, value, self.ttl_ms, stamp]) for name, generation, value, stamp in stores]
        try:
            self._run(self.store_if_unchanged, calls)
        except self.unreachable as error:
            self._lost(error)
        except self.failed as error:  # out of memory under maxmemory noeviction: served, not kept
            log.warning("read cache: Redis refused to keep %s: %s", ", ".join(store[0] for store in stores), error)

    def _run(self, script: Script, calls: list[tuple[list, list]]) -> list:
        """``script`` run once for each (keys, args), in one round trip. A pipeline of registered scripts
        would first ask Redis whether it has them, a second round trip on every read; here a script
        Redis lacks (it restarted, say) is loaded once and the calls it refused are run again."""
        replies = self._pipelined(script, calls)
        refused = [i for i, reply in enumerate(replies) if isinstance(reply, self.no_script)]
        if refused:
            self.client.script_load(script.script)
            for i, reply in zip(refused, self._pipelined(script, [calls[i] for i in refused]), strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _pipelined(self, script: Script, calls: list[tuple[list, list]]) -> list:
        with self.client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            return pipe.execute(raise_on_error=False)

    def derived(self, key: Hashable, inputs: tuple, compute: Callable[[], Any]) -> Any:
        # Every read decodes new values: nothing computed from them is ever the same twice.
        return compute()

    def derived_from_keys(self, key: Hashable, compute: Callable[[], tuple[Any, Iterable[CacheKey]]]) -> Any:
        # Another process's write evicts in Redis only: nothing here would hear of it.
        return compute()[0]

    def forget(self, *keys: CacheKey) -> None:
        """Remember the keys; they are evicted once the transaction commits (evicting sooner would let a
        read fill them again from rows the write has not committed yet)."""
        request_state().forgotten.extend(keys)

    def patch(self, patch: Patch, row: tuple) -> None:
        # Another node may have written in between, unseen from here: only a read can tell.
        self.forget(patch.key)

    def after_commit(self) -> None:
        state = request_state()
        if state.forgotten:
            keys, state.forgotten = state.forgotten, []
            self.evict(keys)

    def after_rollback(self) -> None:
        request_state().forgotten = []

    def sync(self, at_least: int | None = None) -> None:
        """Pay the evictions anyone owes Redis, at least every ``CACHE_SYNC_INTERVAL`` (writers need nothing more)."""
        if time.monotonic() - self.checked_at >= self.sync_interval:
            self.pay_debts()

    def evict(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if time.monotonic() >= self.unreachable_until:
            try:
                self.client.delete(*(self.prefix + key for key in keys))
                return
            except self.failed as error:  # a timeout may have deleted them or not: they are owed either way
                self._lost(error)
        if not self.log_replayed:
            self._owe(keys)

    def replace(self, values: dict[str, Any], stamp: int) -> None:
        """Under a near cache (``log_replayed``), after a write logged up to ``stamp``: keep each value given
        in place of its key's, stamped with it, and evict each key given None; one round trip for all."""
        if time.monotonic() < self.unreachable_until:
            return  # nothing is owed: what Redis kept stale, the stamps refuse
        calls = []
        for key, value in values.items():
            try:
                encoded = b"" if value is None else codec.encode(value)
            except TypeError as error:  # served from the process, read again elsewhere
                log.warning("read cache: cannot keep %s: %s", key, error)
                encoded = b""
            calls.append(([self.prefix + key], [encoded, secrets.token_hex(8), stamp, self.ttl_ms]))
        try:
            self._run(self.replace_script, calls)
        except self.failed as error:
            self._lost(error)

    def pay_debts(self) -> None:
        """Evict what this process and the table say is owed; then Redis can be trusted again."""
        if time.monotonic() < self.unreachable_until or not self.paying.acquire(blocking=False):
            return
        try:
            self.checked_at = time.monotonic()
            if self.log_replayed:
                self.trusted = True  # nothing is owed: what Redis kept stale, the stamps refuse
                return
            with self.lock:
                owed, everything = set(self.owed), self.owe_everything
            if everything:
                self.drop_everything()
            elif owed:
                self.client.delete(*(self.prefix + key for key in owed))
            # A connection of its own: this may run inside a request's transaction, which must stay its own.
            with db.engine.begin() as connection:
                rows = connection.execute(
                    select(CacheInvalidation.id, CacheInvalidation.key)
                    .order_by(CacheInvalidation.id)
                    .limit(OWED_PER_CHECK)
                ).all()
                if rows:
                    self.client.delete(*{self.prefix + row.key for row in rows})
                    connection.execute(
                        delete(CacheInvalidation).where(CacheInvalidation.id.in_([row.id for row in rows]))
                    )
            with self.lock:
                self.owed -= owed
                self.owe_everything &= not everything
            if len(rows) == OWED_PER_CHECK:
                self.checked_at = float("-inf")  # more to pay: at the next request
            if not self.trusted:
                log.warning("read cache: Redis answers and is owed nothing; using it again")
            self.trusted = True
        except self.failed as error:
            self._lost(error)
        except SQLAlchemyError as error:
            # Whatever is owed cannot be read: Redis may hold stale entries, so reads keep off it.
            log.warning("read cache: cannot read the evictions owed to Redis: %s", error)
            self.trusted = False
        finally:
            self.paying.release()

    def drop_everything(self) -> None:
        """Delete every key under the prefix (and only those: the Redis may be shared)."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix) + "*"
        batch = []
        for name in self.client.scan_iter(match=pattern, count=1000):
            batch.append(name)
            if len(batch) == 1000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)

    def _lost(self, error: Exception) -> None:
        if self.trusted:
            log.warning("read cache: Redis unreachable (%s); serving from the database", error)
        self.trusted = False
        self.unreachable_until = time.monotonic() + self.sync_interval

    def _owe(self, keys: list[str]) -> None:
        with self.lock:
            self.owed.update(keys)
            if len(self.owed) > OWED_REMEMBERED:
                self.owed.clear()
                self.owe_everything = True
        try:
            with db.engine.begin() as connection:
                connection.execute(insert(CacheInvalidation), [{"key": key} for key in keys])
        except SQLAlchemyError as error:
            log.warning("read cache: cannot record evictions owed to Redis (this process still owes them): %s", error)
