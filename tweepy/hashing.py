"""The hashing slots of a process, and the requests waiting for one (``HashingQueue``).

A process hashes at most ``HASHING_SLOTS`` passwords at once, on native threads when given them,
which go from one hash to the next without waiting for the event loop. A request waits for a slot
until its deadline; when congested, the queue turns newest-first and its waits short. It refuses at
once a request that could not start in time (503, with a Retry-After that says how long the queue
needs, counting everyone refused within the wait, who will come back too). In a herd, the people
already using the site keep using it: logins from a device the account knows wait in a lane served
first, and while pages are late one hashing thread rests. A queue given ``nice`` (a process's
second queue, the newcomers') moves its hashes to threads below the pages while more people are due
back than it hashes in a wait; the known devices' queue follows it there while that herd is still
being refused, and no longer. Every answer that hashed says where its time went (Server-Timing).
"""

from __future__ import annotations

import functools
import heapq
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from flask import g, has_request_context

from .errors import Busy
from .hashing_threads import HashingThreads, native_lock, timed

BUSY = "Too many people are logging in right now. Nothing was sent anywhere: try again in a few seconds."
# How long, in hashes, a request may wait for a slot in a congested queue: while it waits it holds
# one of the process's request handlers (a greenlet), which the pages it would block need more.
CONGESTED_WAIT_HASHES = 2
# Pages are late when every request that reached the app in one such interval had waited longer
# than the queue's ``pages_late_s`` (CoDel's signal: a standing queue, not a burst).
LATE_INTERVAL_S = 1.0


class Waiter:
    """A request waiting for a hashing slot: when it must start by, whether a slot was handed to it, and,
    on a hashing thread, the work it brings and what came of it."""

    __slots__ = ("deadline", "known", "given", "handed", "work", "started", "outcome", "error")

    def __init__(self, deadline: float, work: Callable[[], Any] | None = None, known: bool = False) -> None:
        self.deadline = deadline  # monotonic seconds; past it, the request is refused unhashed
        self.known = known  # a login from a device the account knows: in the lane served first
        # Set when the slot is handed over (or, on a hashing thread, once the work is done), or to refuse.
        self.given = threading.Event()  # gevent's under monkey-patching: the greenlet sleeps on it
        self.handed = False  # a slot is this waiter's (False when woken only to be refused)
        self.work = work
        self.started = 0.0
        self.outcome: tuple[Any, float] | None = None  # the work's result, and the seconds it took
        self.error: BaseException | None = None


def next_waiter(
    waiting: deque[Waiter], now: float, congested: bool, wake: Callable[[Waiter], None] | None = None
) -> Waiter | None:
    """Whom a freed slot goes to, and who is refused on the way.

    Waiters past their deadline are dropped (woken unhanded by ``wake``: they answer "busy"). Then the
    oldest waiter gets the slot, or, while the queue is congested, the newest: the one with
    the most time left, so the logins that are answered are answered in time instead of
    every login being answered late (adaptive LIFO)."""
    while waiting:
        waiter = waiting.pop() if congested else waiting.popleft()
        if waiter.deadline > now:
            return waiter
        (wake or _set_given)(waiter)
    return None


def _set_given(waiter: Waiter) -> None:
    waiter.given.set()


class Lanes:
    """The waiters of a queue in two lanes: logins from devices their accounts know, then everyone else."""

    def __init__(self) -> None:
        self.known: deque[Waiter] = deque()
        self.others: deque[Waiter] = deque()

    def lane(self, known: bool) -> deque[Waiter]:
        return self.known if known else self.others

    def append(self, waiter: Waiter) -> None:
        self.lane(waiter.known).append(waiter)

    def extend(self, waiters: Iterable[Waiter]) -> None:
        for waiter in waiters:
            self.append(waiter)

    def remove(self, waiter: Waiter) -> None:
        self.lane(waiter.known).remove(waiter)

    def clear(self) -> None:
        self.known.clear()
        self.others.clear()

    def __contains__(self, waiter: Waiter) -> bool:
        return waiter in self.lane(waiter.known)

    def __len__(self) -> int:
        return len(self.known) + len(self.others)

    def next(self, now: float, congested: bool, wake: Callable[[Waiter], None] | None = None) -> Waiter | None:
        """``next_waiter`` of the known lane, else of the other."""
        return next_waiter(self.known, now, congested, wake) or next_waiter(self.others, now, congested, wake)

    def ahead_of(self, known: bool, congested: bool) -> int:
        """Hashes to be done before a waiter joining a lane now starts, the freed slot it gets included:
        the known lane is served first; within a lane, the newest is served first while congested."""
        in_lane = 1 if congested else len(self.lane(known)) + 1
        return in_lane if known else len(self.known) + in_lane


def retry_after_s(queued: int, slots: int, seconds_per_hash: float, spread: float) -> int:
    """Seconds a refused person should wait: long enough for ``queued`` hashes to be done, times
    ``spread`` (1 to 2, drawn per refusal) so that the refused do not all come back together."""
    drain = queued * seconds_per_hash / max(1, slots)
    return max(1, math.ceil(drain * spread))


class HashingQueue:
    """The hashing slots of one process, and the requests waiting for one.

    A request may wait until its deadline (``wait_s`` after nginx received it). A slot that frees
    goes to the oldest waiter of the known lane, else of the other; once the queue has not been
    empty for ``wait_s / 3`` (congested), to the newest, and a request joining it then waits at most
    ``CONGESTED_WAIT_HASHES`` hashes (adaptive LIFO with CoDel's short wait). A request that could
    not start before its deadline given the queue ahead of it is refused at once; every refusal
    says, in Retry-After, how long its lane needs to drain, counting everyone refused within the
    last ``wait_s``: they come back too, and in a herd of logins most are refused before they ever
    queue (their wait spent before they reach the app).

    With native threads (``hashing_threads.py``), each slot is a thread that takes the next waiter's
    work itself as soon as a hash ends, and only the answer goes back through the event loop: under
    gevent a busy loop can take hundreds of milliseconds to come round, and a slot handed back through
    it idles meanwhile."""

    def __init__(
        self,
        slots: int,
        wait_s: float,
        native_threads: bool,
        clock: Callable[[], float] = time.monotonic,
        spread: Callable[[], float] = lambda: 1.0 + random.random(),
        pages_late_s: float = 0.0,
        nice: int = 0,
        herd_of: HashingQueue | None = None,
    ) -> None:
        self.slots = slots
        self.wait_s = wait_s
        # While pages are late (``note_request``), the hashing threads use one slot fewer (0: never).
        self.pages_late_s = pages_late_s
        self.pages_late = False
        self.interval_started, self.interval_least_wait = clock(), math.inf
        self.clock = clock
        self.spread = spread
        self.busy = 0
        self.waiting = Lanes()
        self.last_empty = clock()  # the last time nobody waited
        # When hashes were refused within the last wait, by lane (known devices', then the others').
        self.refused: dict[bool, deque[float]] = {True: deque(), False: deque()}
        self.seconds_per_hash = 0.25  # learnt from the hashes done, to judge the queue ahead
        # Taken by the hashing threads too: a lock of the operating system's, even under monkey-patching.
        self.lock = native_lock() if native_threads else threading.Lock()
        # With ``nice``, in a herd the hashes move to threads this far below the thread making the queue.
        self.nice = nice
        self.due_back: list[float] = []  # when those refused are due back (a heap), with ``nice``
        # Or the queue whose herd moves these hashes below the pages too (the newcomers', for the known
        # devices' queue), while that herd is still arriving: these hashes' own refusals, and those of
        # its herd who are due back but gone, would keep the people already here below the pages after it.
        # Its lock is taken inside this queue's, never the other way round.
        self.herd_of = herd_of
        self.threads = HashingThreads(self) if native_threads else None

    @property
    def slots_now(self) -> int:
        """The slots hashes may take now: one fewer while pages are late, so they keep a core."""
        return max(1, self.slots - 1) if self.pages_late else self.slots

    def note_request(self, received_at: float) -> None:
        """A request nginx received at ``received_at`` (its clock, seconds since the epoch) reached the app.
        Once an interval is over, pages are late if every request in it waited longer than ``pages_late_s``:
        a standing queue of pages, not a burst. Whatever the hashes are doing, the pages then get a core
        back (a cold start's pages seldom wait that long; after a herd, the logins refused in it all come
        back to threads ahead of the pages and would hold both cores)."""
        if not self.pages_late_s:
            return
        now = self.clock()
        self.interval_least_wait = min(self.interval_least_wait, _waited(received_at))
        if now - self.interval_started >= LATE_INTERVAL_S:
            self.pages_late = self.interval_least_wait > self.pages_late_s
            self.interval_started, self.interval_least_wait = now, math.inf

    @property
    def congested(self) -> bool:
        return bool(self.waiting) and self.clock() - self.last_empty > self.wait_s / 3

    def busy_refusal(self, known: bool = False) -> Busy:
        """A refusal whose Retry-After is the time to hash what is ahead in its lane, counting everyone
        refused within the wait there (they come back): a known device waits for its own lane only."""
        now = self.clock()
        self.refused[known].append(now)
        self._forget_refusals_before(now - self.wait_s)
        queued = self.busy + len(self.waiting.known) + len(self.refused[True])
        if not known:
            queued += len(self.waiting.others) + len(self.refused[False])
        retry_after = retry_after_s(queued, self.slots, self.seconds_per_hash, self.spread())
        if self.nice and self.herd_of is None:
            heapq.heappush(self.due_back, now + retry_after)
        return Busy(BUSY, retry_after=retry_after)

    def in_herd(self, now: float) -> bool:
        """Whether more people are due back (refused, and not back for a wait yet) than the slots hash in
        one wait: a herd, which hashing ahead of the pages would not serve in time anyway. Only a queue
        with threads below the pages (``nice``) tells; the caller holds the lock."""
        if not self.nice:
            return False
        if self.herd_of is not None:
            with self.herd_of.lock:
                return self.herd_of.refusing_a_herd(now)
        while self.due_back and self.due_back[0] < now - self.wait_s:
            heapq.heappop(self.due_back)
        return self._more_than_a_wait_hashes(len(self.due_back))

    def refusing_a_herd(self, now: float) -> bool:
        """Whether more were refused within the last wait than the slots hash in one: a herd still arriving.
        The caller holds the lock."""
        self._forget_refusals_before(now - self.wait_s)
        return self._more_than_a_wait_hashes(len(self.refused[False]))

    def _forget_refusals_before(self, since: float) -> None:
        for refused in self.refused.values():
            while refused and refused[0] < since:
                refused.popleft()

    def _more_than_a_wait_hashes(self, people: int) -> bool:
        """Whether ``people`` are more than the slots hash in one wait: a herd."""
        return people > self.slots * self.wait_s / self.seconds_per_hash

    def _refuses(self, now: float, deadline: float, known: bool) -> bool:
        """Whether a hash queued now could not start by ``deadline``, given the hashes ahead of it."""
        slots = self.slots_now
        if self.busy + len(self.waiting) < slots and deadline > now:
            return False
        return now + self.waiting.ahead_of(known, self.congested) * self.seconds_per_hash / slots > deadline

    def refusal(self, received_at: float | None = None, known: bool = False) -> Busy | None:
        """The refusal a hash asked for now would get at once, or None: asked before a request does any
        work that the refusal would waste."""
        with self.lock:
            now = self.clock()
            deadline = now - _waited(received_at) + self.wait_s
            return self.busy_refusal(known) if self._refuses(now, deadline, known) else None

    def _take(self, deadline: float, work: Callable[[], Any] | None = None, known: bool = False) -> Waiter | None:
        """A slot at once (None), or a place in the queue (a Waiter); Busy when it could not start in time.

        With hashing threads every request queues (a free thread takes it at once)."""
        with self.lock:
            now = self.clock()
            if not self.waiting:
                self.last_empty = now
                if self.busy < self.slots and deadline > now and not self.threads:
                    self.busy += 1
                    return None
            if self._refuses(now, deadline, known):
                raise self.busy_refusal(known)
            if self.congested:  # newest first: a slot comes soon or not at all, so it waits no longer
                deadline = min(deadline, now + CONGESTED_WAIT_HASHES * self.seconds_per_hash)
            waiter = Waiter(deadline, work, known)
            self.waiting.append(waiter)
        if self.threads:
            self.threads.ring()
        return waiter

    def _wait(self, waiter: Waiter) -> None:
        try:
            waiter.given.wait(max(0.0, waiter.deadline - self.clock()))
        except BaseException:  # the request's greenlet killed while it waited: a slot handed to it is passed on
            with self.lock:
                handed = waiter.handed
                if not handed and waiter in self.waiting:
                    self.waiting.remove(waiter)
            if handed and not self.threads:
                self._give_back()
            raise
        with self.lock:
            if waiter.handed:
                return
            if waiter in self.waiting:
                self.waiting.remove(waiter)
            raise self.busy_refusal(waiter.known)

    def _give_back(self) -> None:
        with self.lock:
            now = self.clock()
            waiter = self.waiting.next(now, self.congested)
            if waiter is None:
                self.busy -= 1
            else:
                waiter.handed = True  # the slot passes to it, still counted busy
                waiter.given.set()
            if not self.waiting:
                self.last_empty = now

    def _learn(self, hashing_s: float) -> None:
        self.seconds_per_hash = 0.8 * self.seconds_per_hash + 0.2 * hashing_s

    def run(self, work: Callable[..., Any], *args: Any, received_at: float | None = None, known: bool = False) -> Any:
        """``work(*args)`` in a hashing slot; Busy if it could not start by ``wait_s`` after ``received_at``
        (nginx's clock, seconds since the epoch; now when not given). ``known``: in the lane served first."""
        entered = self.clock()
        waited = _waited(received_at)
        deadline = entered - waited + self.wait_s
        if self.threads:
            waiter = self._take(deadline, functools.partial(work, *args), known)
            self._wait(waiter)  # handed to a thread: it waits on until its work is done
            waiter.given.wait()
            if waiter.error is not None:
                raise waiter.error
            (result, hashing_s), started = waiter.outcome, waiter.started
        else:
            waiter = self._take(deadline, known=known)
            if waiter is not None:
                self._wait(waiter)
            try:
                started = self.clock()
                result, hashing_s = timed(work, *args)
                self._learn(hashing_s)
            finally:
                self._give_back()
        _note_timing(before=waited, wait=started - entered, hash=hashing_s, back=self.clock() - started - hashing_s)
        return result


def _waited(received_at: float | None) -> float:
    """Seconds since nginx received the request (its clock, seconds since the epoch; none when not given)."""
    return max(0.0, time.time() - received_at) if received_at else 0.0


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
