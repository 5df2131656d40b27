"""The native threads a process hashes on, with ``BCRYPT_IN_THREADPOOL`` (``HashingThreads``).

Each of a queue's slots is a thread that takes the next waiter itself when its hash ends, under the
queue's rules (``hashing.py``), and wakes the waiting greenlet through the event loop, which it never
waits for. A queue given ``nice`` has a second set of threads that far below, which hash instead of
the first in a herd. bcrypt releases the GIL, so the threads hash while the greenlets serve pages.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hashing import HashingQueue, Waiter

# What a hashing thread calls itself (``top -H``, /proc/<pid>/task/<tid>/comm): the profile and the
# benchmark count the CPU time of hashing by it, apart from everything else the process does.
HASHING_THREAD = "tweepy-hash"
# How often a queue's threads look for work when a herd can move its hashes from one set to the other.
HERD_POLL_S = 0.05


class HashingThreads:
    """The threads of one queue's slots (and, with its ``nice``, the set below the pages). With two sets,
    a thread also looks for work every ``HERD_POLL_S``, as a herd begins or ends with nobody ringing."""

    def __init__(self, queue: HashingQueue) -> None:
        from gevent import get_hub, monkey
        from setproctitle import setthreadtitle  # requirements/serve.txt's: BCRYPT_IN_THREADPOOL is a served stage's

        # Imported here, never on a hashing thread: under monkey-patching the import locks are gevent's,
        # and a native thread importing beside another can block on one for good, never to hash.
        self.name_thread = setthreadtitle
        self.queue = queue
        original = monkey.get_original("queue", "SimpleQueue")  # blocks a native thread, never a greenlet
        self.bells = {False: original(), True: original()}  # the threads ahead of the pages', those below's
        self.poll_s = HERD_POLL_S if queue.nice else None
        self.done: deque[Waiter] = deque()  # answered or refused, for the event loop to wake
        self.wakeup = None
        if monkey.is_module_patched("threading"):  # the waiting greenlets sleep on gevent's events
            self.wakeup = get_hub().loop.async_()
            self.wakeup.start(self._wake_done)
        start = monkey.get_original("_thread", "start_new_thread")
        for below in (False, True) if queue.nice else (False,):
            for _ in range(queue.slots):  # started now, from the thread making the queue: its priority is theirs
                start(self._serve, (below,))

    def ring(self) -> None:
        """Someone queued: a free thread takes them (one below the pages in a herd)."""
        with self.queue.lock:
            below = self.queue.in_herd(self.queue.clock())
        self.bells[below].put(None)

    def _serve(self, below: bool) -> None:
        self.name_thread(HASHING_THREAD)
        if below:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + self.queue.nice))
        bell = self.bells[below]
        while True:
            try:
                bell.get(timeout=self.poll_s)
            except Empty:
                pass
            while (waiter := self._next(below)) is not None:
                self._hash(waiter)

    def _next(self, below: bool) -> Waiter | None:
        queue = self.queue
        with queue.lock:
            now = queue.clock()
            # Pages are late: a thread rests until they catch up. A herd: the threads below the pages hash.
            if queue.busy >= queue.slots_now or below != queue.in_herd(now):
                return None
            waiter = queue.waiting.next(now, queue.congested, wake=self._finish)
            if waiter is not None:
                waiter.handed, waiter.started = True, now
                queue.busy += 1
            if not queue.waiting:
                queue.last_empty = now
            return waiter

    def _hash(self, waiter: Waiter) -> None:
        try:
            waiter.outcome = timed(waiter.work)
        except BaseException as error:
            waiter.error = error
        with self.queue.lock:
            self.queue.busy -= 1
            if waiter.outcome:
                self.queue._learn(waiter.outcome[1])
        self._finish(waiter)

    def _finish(self, waiter: Waiter) -> None:
        if self.wakeup is None:
            waiter.given.set()  # a plain thread's event: safe to set from here
        else:
            self.done.append(waiter)
            self.wakeup.send()  # thread-safe: the loop runs _wake_done when it comes round

    def _wake_done(self) -> None:
        while self.done:
            self.done.popleft().given.set()


def native_lock():
    """A lock of the operating system's, even under monkey-patching: taken by greenlets and threads alike."""
    from gevent import monkey

    return monkey.get_original("_thread", "allocate_lock")()


def timed(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """What ``work(*args)`` returns, and the seconds it took."""
    started = time.monotonic()
    return work(*args), time.monotonic() - started
