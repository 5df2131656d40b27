"""The hashing slots of a process, and the requests waiting for one (``HashingQueue``).

A process hashes at most ``HASHING_SLOTS`` passwords at once, on native threads when given them.
A request waits for a slot until its deadline; the queue turns newest-first when congested, refuses
at once a request that could not start in time (503, with a Retry-After that says how long the
queue needs).
Every answer that hashed says where its time went in a Server-Timing header.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flask import g, has_request_context

from .errors import Busy

BUSY = "Too many people are logging in right now. Nothing was sent anywhere: try again in a few seconds."
# What a hashing thread calls itself (``top -H``, /proc/<pid>/task/<tid>/comm): the profile and the
# benchmark count the CPU time of hashing by it, apart from everything else the process does.
HASHING_THREAD = "tweepy-hash"


class Waiter:
    """A request waiting for a hashing slot: when it must start by, and whether a slot was handed to it."""

    __slots__ = ("deadline", "given", "handed")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # monotonic seconds; past it, the request is refused unhashed
        self.given = threading.Event()  # gevent's under monkey-patching: the greenlet sleeps on it
        self.handed = False  # a slot is this waiter's (False when woken only to be refused)


def next_waiter(waiting: deque[Waiter], now: float, congested: bool) -> Waiter | None:
    """Whom a freed slot goes to, and who is refused on the way.

    Waiters past their deadline are dropped (woken unhanded: they answer "busy"). Then the
    oldest waiter gets the slot, or, while the queue is congested, the newest: the one with
    the most time left, so the logins that are answered are answered in time instead of
    every login being answered late (adaptive LIFO)."""
    while waiting:
        waiter = waiting.pop() if congested else waiting.popleft()
        if waiter.deadline > now:
            return waiter
        waiter.given.set()
    return None


def retry_after_s(queued: int, slots: int, seconds_per_hash: float, spread: float) -> int:
    """Seconds a refused person should wait: long enough for the hashes queued now to be done, times
    ``spread`` (1 to 2, drawn per refusal) so that the refused do not all come back together."""
    drain = queued * seconds_per_hash / max(1, slots)
    return max(1, math.ceil(drain * spread))


class HashingQueue:
    """The hashing slots of one process, and the requests waiting for one.

    A request may wait until its deadline (``wait_s`` after nginx received it). A slot that frees
    goes to the oldest waiter; once the queue has not been empty for ``wait_s / 3`` (congested), to
    the newest. A request that could not start before its deadline given the queue ahead of it is
    refused at once; every refusal says, in Retry-After, how long the queue needs to drain."""

    def __init__(
        self,
        slots: int,
        wait_s: float,
        native_threads: bool,
        clock: Callable[[], float] = time.monotonic,
        spread: Callable[[], float] = lambda: 1.0 + random.random(),
    ) -> None:
        self.slots = slots
        self.wait_s = wait_s
        self.clock = clock
        self.spread = spread
        self.lock = threading.Lock()
        self.busy = 0
        self.waiting: deque[Waiter] = deque()
        self.last_empty = clock()  # the last time nobody waited
        self.seconds_per_hash = 0.25  # learnt from the hashes done, to judge the queue ahead
        self.pool = None
        if native_threads:
            from gevent.threadpool import ThreadPool

            self.pool = ThreadPool(maxsize=slots)
            self.pool.size = slots  # its threads start now, from the thread making the queue

    @property
    def congested(self) -> bool:
        return bool(self.waiting) and self.clock() - self.last_empty > self.wait_s / 3

    def busy_refusal(self) -> Busy:
        queued = self.busy + len(self.waiting)
        return Busy(BUSY, retry_after=retry_after_s(queued, self.slots, self.seconds_per_hash, self.spread()))

    def _take(self, deadline: float) -> Waiter | None:
        """A slot at once (None), or a place in the queue (a Waiter); Busy when it could not start in time."""
        with self.lock:
            now = self.clock()
            if not self.waiting:
                self.last_empty = now
                if self.busy < self.slots and deadline > now:
                    self.busy += 1
                    return None
            # The slot it can hope for: the next to free while congested (newest first), else its turn.
            ahead = 1 if self.congested else len(self.waiting) + 1
            if now + ahead * self.seconds_per_hash / self.slots > deadline:
                raise self.busy_refusal()
            waiter = Waiter(deadline)
            self.waiting.append(waiter)
            return waiter

    def _wait(self, waiter: Waiter) -> None:
        try:
            waiter.given.wait(max(0.0, waiter.deadline - self.clock()))
        except BaseException:  # the request's greenlet killed while it waited: a slot handed to it is passed on
            with self.lock:
                handed = waiter.handed
                if not handed and waiter in self.waiting:
                    self.waiting.remove(waiter)
            if handed:
                self._give_back()
            raise
        with self.lock:
            if waiter.handed:
                return
            if waiter in self.waiting:
                self.waiting.remove(waiter)
            raise self.busy_refusal()

    def _give_back(self) -> None:
        with self.lock:
            now = self.clock()
            waiter = next_waiter(self.waiting, now, self.congested)
            if waiter is None:
                self.busy -= 1
            else:
                waiter.handed = True  # the slot passes to it, still counted busy
                waiter.given.set()
            if not self.waiting:
                self.last_empty = now

    def run(self, work: Callable[..., Any], *args: Any, received_at: float | None = None) -> Any:
        """``work(*args)`` in a hashing slot; Busy if it could not start by ``wait_s`` after ``received_at``
        (nginx's clock, seconds since the epoch; now when not given)."""
        entered = self.clock()
        waited = max(0.0, time.time() - received_at) if received_at else 0.0
        waiter = self._take(entered - waited + self.wait_s)
        if waiter is not None:
            self._wait(waiter)
        try:
            started = self.clock()
            # `is not None`: an idle ThreadPool has no tasks, so it is falsy.
            if self.pool is not None:
                result, hashing_s = self.pool.apply(_in_hashing_thread, (work, *args))
            else:
                result, hashing_s = _timed(work, *args)
            self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * hashing_s
            _note_timing(before=waited, wait=started - entered, hash=hashing_s, back=self.clock() - started - hashing_s)
            return result
        finally:
            self._give_back()


def _timed(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    started = time.monotonic()
    return work(*args), time.monotonic() - started


def _in_hashing_thread(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``work(*args)`` and how long it took, on a pool thread that carries ``HASHING_THREAD`` as its name."""
    from setproctitle import setthreadtitle  # requirements/serve.txt's, as gevent's pool is

    setthreadtitle(HASHING_THREAD)
    return _timed(work, *args)


def _note_timing(**seconds: float) -> None:
    if has_request_context():
        g.hash_timing = seconds
        g.hash_returned_at = time.monotonic()


def say_where_the_time_went(response):
    """An after-request hook: the Server-Timing of an answer that hashed."""
    timing = g.pop("hash_timing", None)
    if timing is not None:
        timing["after"] = time.monotonic() - g.pop("hash_returned_at")
        response.headers["Server-Timing"] = ", ".join(f"{name};dur={1000 * s:.1f}" for name, s in timing.items())
    return response
