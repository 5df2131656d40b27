"""Passwords are hashed in turns, and nobody waits long for a turn: a login that cannot
start hashing in time is told at once that the site is busy (503), and no hash is made
for a request that has already waited too long."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import pytest
from helpers.browser import Browser
from helpers.pages import errors
from helpers.stored import PASSWORD, add_users

from tools.bench.procfs import thread_cpu_seconds
from tweepy import auth, passwords, throttle
from tweepy.errors import Busy
from tweepy.hashing import HashingQueue, Waiter, next_waiter, retry_after_s
from tweepy.hashing_threads import HASHING_THREAD
from tweepy.passwords import REQUEST_START


def slow_hash(seconds: float):
    def work():
        time.sleep(seconds)
        return "hashed"

    return work


def test_a_free_slot_hashes_at_once():
    queue = HashingQueue(slots=1, wait_s=1.0, native_threads=False)
    assert queue.run(slow_hash(0.01)) == "hashed"


def test_a_hash_that_cannot_get_a_slot_in_time_is_refused_within_the_wait():
    queue = HashingQueue(slots=1, wait_s=0.3, native_threads=False)
    holder = threading.Thread(target=queue.run, args=(slow_hash(1.0),))
    holder.start()
    time.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(Busy) as refused:
        queue.run(slow_hash(0.01))
    assert time.monotonic() - started < 0.6
    assert refused.value.retry_after >= 1
    holder.join()


def test_a_hash_waits_for_a_slot_that_frees_in_time():
    queue = HashingQueue(slots=1, wait_s=2.0, native_threads=False)
    holder = threading.Thread(target=queue.run, args=(slow_hash(0.2),))
    holder.start()
    time.sleep(0.05)
    assert queue.run(slow_hash(0.01)) == "hashed"
    holder.join()


def test_a_queue_longer_than_the_wait_is_refused_without_waiting():
    queue = HashingQueue(slots=1, wait_s=1.0, native_threads=False)
    queue.seconds_per_hash = 0.25
    queue.busy = 1
    queue.waiting.extend(Waiter(time.monotonic() + 10) for _ in range(8))  # two seconds of hashing ahead
    started = time.monotonic()
    with pytest.raises(Busy):
        queue.run(slow_hash(0.01))
    assert time.monotonic() - started < 0.05


def test_a_request_that_already_waited_the_whole_budget_is_never_hashed():
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False)
    hashed = []
    with pytest.raises(Busy):
        queue.run(lambda: hashed.append(1), received_at=time.time() - 5)
    assert hashed == []
    assert queue.run(lambda: "fresh", received_at=time.time() - 1) == "fresh"


def test_the_queue_learns_how_long_a_hash_takes():
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False)
    for _ in range(10):
        queue.run(slow_hash(0.02))
    assert 0.015 < queue.seconds_per_hash < 0.1


def test_a_login_nginx_received_long_ago_gets_a_busy_form_and_no_hash(app, monkeypatch):
    add_users(app, "alice")
    checked = []
    monkeypatch.setattr(passwords.bcrypt, "check_password_hash", lambda *args: checked.append(args) or True)
    client = app.test_client()
    client.environ_base[REQUEST_START] = f"{time.time() - 60:.3f}"
    response = Browser(client).login("alice", PASSWORD)
    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "try again in a few seconds" in errors(response)[0]
    assert checked == []


def test_a_login_that_would_be_refused_as_busy_counts_no_attempt_and_reads_no_password(app, monkeypatch):
    """The queue is asked first: a refusal it would give costs the request no throttle writes (counted, then
    taken back) and no password read, which in a herd of logins is most of what a refused login cost."""
    add_users(app, "alice")
    counted, read = [], []

    def note_attempts(attempts):
        counted.append(attempts)
        return list(range(len(attempts)))

    monkeypatch.setattr(throttle.writes, "note_attempts", note_attempts)
    monkeypatch.setattr(auth.queries, "credentials_of", lambda name: read.append(name))
    client = app.test_client()
    client.environ_base[REQUEST_START] = f"{time.time() - 60:.3f}"
    assert Browser(client).login("alice", PASSWORD).status_code == 503
    assert counted == [] and read == []


def test_a_registration_that_cannot_hash_in_time_stores_nothing(app):
    client = app.test_client()
    client.environ_base[REQUEST_START] = f"{time.time() - 60:.3f}"
    response = Browser(client).register("carol")
    assert response.status_code == 503
    assert Browser(app.test_client()).login("carol").status_code == 401


def test_only_a_login_from_a_device_the_account_knows_hashes_in_the_lane_served_first(make_app, monkeypatch):
    app = make_app(HASH_KNOWN_DEVICES_FIRST=True)
    add_users(app, "alice", "bob")
    lanes = []
    run = HashingQueue.run

    def noting_the_lane(self, work, *args, received_at=None, known=False):
        lanes.append(known)
        return run(self, work, *args, received_at=received_at, known=known)

    monkeypatch.setattr(HashingQueue, "run", noting_the_lane)
    alices_phone = Browser(app.test_client())
    assert alices_phone.login("alice", PASSWORD).status_code == 303  # a new device: the device cookie is set
    alices_phone.logout()
    assert alices_phone.login("alice", PASSWORD).status_code == 303  # now a device alice's account knows
    alices_phone.logout()
    assert alices_phone.login("bob", PASSWORD).status_code == 303  # a device bob's account does not know
    assert lanes == [False, True, False]


def test_a_registration_from_a_browser_that_logged_in_here_before_hashes_in_the_lane_served_first(
    make_app, monkeypatch
):
    app = make_app(HASH_KNOWN_DEVICES_FIRST=True)
    add_users(app, "alice")
    lanes = []
    run = HashingQueue.run
    monkeypatch.setattr(HashingQueue, "run", lambda self, *a, **kw: lanes.append(kw["known"]) or run(self, *a, **kw))
    alices_phone = Browser(app.test_client())
    assert alices_phone.login("alice", PASSWORD).status_code == 303
    alices_phone.logout()
    assert alices_phone.register("carol").status_code == 303  # someone already using the site
    assert Browser(app.test_client()).register("dave").status_code == 303  # a browser new to it
    assert lanes == [False, True, False]


def test_with_newcomers_nice_a_herd_hashes_below_the_pages_and_known_devices_with_it_while_it_arrives(
    make_app, monkeypatch
):
    """NEWCOMERS_NICE gives the hashes of browsers new to the site a queue of their own, which moves them
    to threads below the thread serving pages in a herd; logins from devices their accounts know go below
    with them while the herd is being refused, and back ahead once it stops arriving, though those of it
    refused are still due back."""
    seen = {}

    def serve():  # in a thread of its own, so the test's own thread keeps its priority
        before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        app = make_app(
            BCRYPT_IN_THREADPOOL=True,
            HASH_KNOWN_DEVICES_FIRST=True,
            HASHING_SLOTS=2,
            HASH_WAIT_S=2.5,
            PAGES_NICE=5,
            NEWCOMERS_NICE=9,
        )
        add_users(app, "alice", "bob")
        priorities = []
        run = HashingQueue.run

        def noting_the_thread(self, work, *args, received_at=None, known=False):
            tid = run(self, threading.get_native_id)
            priorities.append(os.getpriority(os.PRIO_PROCESS, tid))
            return run(self, work, *args, received_at=received_at, known=known)

        monkeypatch.setattr(HashingQueue, "run", noting_the_thread)
        phone = Browser(app.test_client())
        for _ in range(2):  # a new device, then one the account knows
            assert phone.login("alice", PASSWORD).status_code == 303
            phone.logout()
        newcomers = passwords._queue(app.config, first=False)
        for _ in range(100):  # a herd refused, and due back
            newcomers.busy_refusal()
        assert Browser(app.test_client()).login("bob", PASSWORD).status_code == 303  # a newcomer in the herd
        assert phone.login("alice", PASSWORD).status_code == 303  # alice, in the herd too
        phone.logout()
        newcomers.refused[False].clear()  # the herd stops arriving; those refused are still due back
        assert Browser(app.test_client()).login("bob", PASSWORD).status_code == 303
        assert phone.login("alice", PASSWORD).status_code == 303
        seen.update(before=before, pages=os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), hashes=priorities)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(30)
    ahead, below = seen["before"], min(19, seen["before"] + 9)
    assert seen["pages"] == min(19, seen["before"] + 5)
    assert seen["hashes"] == [ahead, ahead, below, below, below, ahead]


def test_without_the_setting_every_login_hashes_in_one_lane(app, monkeypatch):
    add_users(app, "alice")
    lanes = []
    run = HashingQueue.run
    monkeypatch.setattr(HashingQueue, "run", lambda self, *a, **kw: lanes.append(kw["known"]) or run(self, *a, **kw))
    phone = Browser(app.test_client())
    for _ in range(2):
        assert phone.login("alice", PASSWORD).status_code == 303
        phone.logout()
    assert lanes == [False, False]


def test_every_request_tells_the_queue_how_long_it_waited_on_its_way_in(make_app):
    app = make_app(BCRYPT_IN_THREADPOOL=True, PAGES_LATE_S=0.5)
    queue = passwords._queue(app.config)
    client = app.test_client()
    client.environ_base[REQUEST_START] = f"{time.time() - 2:.3f}"
    queue.interval_started -= 5  # this request ends an interval
    assert client.get("/").status_code == 200
    assert queue.pages_late


def test_with_native_threads_the_hash_runs_off_the_thread_serving_requests():
    queue = HashingQueue(slots=1, wait_s=1.0, native_threads=True)
    assert queue.run(threading.get_native_id) != threading.get_native_id()


def test_a_native_hashing_thread_carries_the_name_its_cpu_time_is_counted_by():
    queue = HashingQueue(slots=1, wait_s=1.0, native_threads=True)

    def spin_and_say_who_i_am():
        ends = time.thread_time() + 0.05
        while time.thread_time() < ends:
            pass
        return threading.get_native_id()

    before = thread_cpu_seconds([os.getpid()], HASHING_THREAD)
    tid = queue.run(spin_and_say_who_i_am)
    assert Path(f"/proc/self/task/{tid}/comm").read_text().rstrip("\n") == HASHING_THREAD
    # Its 50 ms of spinning, counted in clock ticks of 10 ms (rounded to them: 0.06 - 0.02 is not 0.04 in floats).
    assert 0.04 <= round(thread_cpu_seconds([os.getpid()], HASHING_THREAD) - before, 2) < 0.2


def test_with_pages_nice_the_thread_serving_pages_runs_below_the_hashing_threads(make_app):
    """PAGES_NICE lowers the priority of the thread that made the app (which serves its pages) only: the
    hashing threads, started from it first, keep the priority it had, so waiting hashes get the cores."""
    seen = {}

    def serve():  # in a thread of its own, so the test's own thread keeps its priority
        before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        app = make_app(BCRYPT_IN_THREADPOOL=True, HASHING_SLOTS=3, HASH_WAIT_S=2.75, PAGES_NICE=5)
        hashing_thread = passwords._queue(app.config).run(threading.get_native_id)
        seen.update(
            before=before,
            pages=os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
            hashing=os.getpriority(os.PRIO_PROCESS, hashing_thread),
        )

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(30)
    assert seen["pages"] == min(19, seen["before"] + 5)
    assert seen["hashing"] == seen["before"]


# The queue's order and its Retry-After, on a clock the test moves.


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def waiters(*deadlines: float) -> deque:
    return deque(Waiter(deadline) for deadline in deadlines)


def test_newcomers_are_a_herd_while_more_are_due_back_than_the_slots_hash_in_a_wait():
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, spread=lambda: 1.0, nice=9)
    queue.seconds_per_hash = 0.25  # 2 slots hash 24 in a wait of 3 s
    retry_afters = [queue.busy_refusal().retry_after for _ in range(24)]
    assert not queue.in_herd(clock.now)
    last = queue.busy_refusal().retry_after
    assert queue.in_herd(clock.now)
    clock.now += max([*retry_afters, last]) + 3.0  # all were due back, and a wait has gone by
    assert not queue.in_herd(clock.now)


def test_the_known_devices_queue_follows_a_herd_of_newcomers_while_it_is_being_refused_and_no_longer():
    clock = Clock()
    newcomers = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, spread=lambda: 1.0, nice=9)
    known = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, nice=9, herd_of=newcomers)
    newcomers.seconds_per_hash = 0.25  # 2 slots hash 24 in a wait of 3 s
    for _ in range(100):
        known.busy_refusal(known=True)
    assert not known.in_herd(clock.now), "its own refusals are no herd of newcomers"
    for _ in range(25):
        newcomers.busy_refusal()
    assert known.in_herd(clock.now) and newcomers.in_herd(clock.now)
    clock.now += 3.5  # no newcomer refused for a wait: the herd has stopped arriving
    assert newcomers.in_herd(clock.now), "its newcomers are still due back"
    assert not known.in_herd(clock.now), "the people already here are ahead of the pages again"


def test_a_queue_without_threads_below_the_pages_is_never_in_a_herd():
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock)
    for _ in range(100):
        queue.busy_refusal()
    assert not queue.in_herd(clock.now)


def test_a_freed_slot_goes_to_the_oldest_waiter_while_the_queue_is_short():
    queue = waiters(110, 111, 112)
    assert next_waiter(queue, now=100, congested=False).deadline == 110
    assert [w.deadline for w in queue] == [111, 112]


def test_a_freed_slot_goes_to_the_newest_waiter_while_the_queue_is_congested():
    queue = waiters(110, 111, 112)
    assert next_waiter(queue, now=100, congested=True).deadline == 112


def test_waiters_past_their_deadline_are_woken_to_be_refused_and_never_given_the_slot():
    late, on_time = Waiter(99), Waiter(105)
    queue = deque([late, on_time])
    assert next_waiter(queue, now=100, congested=False) is on_time
    assert late.given.is_set() and not late.handed
    assert next_waiter(deque([Waiter(90)]), now=100, congested=True) is None


def test_the_queue_turns_congested_once_it_has_not_been_empty_for_a_third_of_the_wait():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    assert queue._take(clock.now + 3) is None  # the free slot
    queue._take(clock.now + 3)  # waits
    assert not queue.congested
    clock.now += 1.1
    assert queue.congested


def test_a_newcomer_to_a_congested_queue_is_admitted_when_the_next_free_slot_comes_in_time():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue.seconds_per_hash = 0.25
    queue._take(clock.now + 3)
    for _ in range(20):  # five seconds of hashing ahead, in turn
        queue._take(clock.now + 100)
    with pytest.raises(Busy):
        queue._take(clock.now + 3)  # its turn would come too late
    clock.now += 2  # nobody has left the queue for two seconds: newest first
    assert isinstance(queue._take(clock.now + 3), Waiter)


def test_in_a_congested_queue_a_request_waits_two_hashes_at_most_not_the_whole_wait():
    """While it waits it holds a request handler that pages need: newest first, it gets the next slot
    soon or not at all."""
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock)
    queue.seconds_per_hash = 0.2
    queue.busy = 2
    early = queue._take(clock.now + 3)
    assert early.deadline == clock.now + 3  # not congested yet: the whole wait
    clock.now += 1.1
    late = queue._take(clock.now + 3)
    assert late.deadline == pytest.approx(clock.now + 2 * 0.2)
    clock.now += 0.5
    queue._give_back()
    assert not late.handed and late.given.is_set()  # woken to be refused: its short wait is over
    assert early.handed


def test_a_slot_given_back_passes_to_a_waiter_and_stays_counted_busy():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue._take(clock.now + 3)
    waiter = queue._take(clock.now + 3)
    queue._give_back()
    assert waiter.handed and waiter.given.is_set()
    assert queue.busy == 1 and not queue.waiting
    queue._give_back()
    assert queue.busy == 0


def test_a_waiter_killed_after_it_was_handed_a_slot_passes_the_slot_on():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue._take(clock.now + 3)
    waiter = queue._take(clock.now + 3)
    queue._give_back()  # the slot is handed to the waiter...

    def killed(_timeout):
        raise KeyboardInterrupt  # ...whose request dies before it wakes

    waiter.given.wait = killed
    with pytest.raises(KeyboardInterrupt):
        queue._wait(waiter)
    assert queue.busy == 0


def test_a_freed_slot_goes_to_a_device_the_account_knows_before_anyone_who_waited_longer():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue._take(clock.now + 3)  # the slot
    newcomers = [queue._take(clock.now + 3) for _ in range(2)]
    returning = queue._take(clock.now + 3, known=True)
    queue._give_back()
    assert returning.handed and not any(w.handed for w in newcomers)
    queue._give_back()
    assert newcomers[0].handed  # then the other lane, oldest first while the queue is short


def test_a_known_device_is_admitted_past_a_queue_of_newcomers_that_would_refuse_another_newcomer():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue.seconds_per_hash = 0.25
    queue._take(clock.now + 3)
    for _ in range(20):  # five seconds of newcomers' hashing ahead
        queue._take(clock.now + 100)
    with pytest.raises(Busy):
        queue._take(clock.now + 3)
    assert isinstance(queue._take(clock.now + 3, known=True), Waiter)
    assert queue.refusal(known=True) is None and queue.refusal() is not None


def test_a_newcomer_counts_the_known_devices_waiting_ahead_of_it():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    queue.seconds_per_hash = 0.25
    queue._take(clock.now + 3)
    for _ in range(20):
        queue._take(clock.now + 100, known=True)
    clock.now += 2  # congested: newest first within a lane, but the known lane still goes first
    with pytest.raises(Busy):
        queue._take(clock.now + 3)
    assert isinstance(queue._take(clock.now + 3, known=True), Waiter)


def test_a_refused_known_device_is_told_the_time_its_own_lane_needs():
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, spread=lambda: 1.0)
    queue.seconds_per_hash = 0.3
    queue.busy = 2
    queue.waiting.extend(Waiter(clock.now + 100) for _ in range(38))
    queue.waiting.extend(Waiter(clock.now + 100, known=True) for _ in range(8))
    assert queue.busy_refusal(known=True).retry_after == 2  # (2 hashing + 8 waiting + itself) * 0.3 / 2
    assert queue.busy_refusal().retry_after == 8  # its lane comes after the known one, and 38 more


def nginx_received(seconds_ago: float) -> float:
    """When nginx received a request that reaches the app now, ``seconds_ago`` (its clock: the epoch's)."""
    return time.time() - seconds_ago


def test_pages_are_late_once_every_request_of_an_interval_waited_longer_than_the_setting():
    """Whether or not logins are refused: after a herd, those it refused come back to threads ahead of the
    pages, which would hold both cores while no login is refused."""
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, pages_late_s=0.5)
    for waited in (0.9, 1.2, 0.8):
        queue.note_request(nginx_received(waited))
        clock.now += 0.4
    queue.note_request(nginx_received(0.7))  # the interval is over: every request in it waited over 0.5 s
    assert queue.pages_late and queue.slots_now == 1
    for waited in (2.0, 0.1, 2.0):  # one came straight in: a burst, not a standing queue
        clock.now += 0.4
        queue.note_request(nginx_received(waited))
    assert not queue.pages_late and queue.slots_now == 2


def test_without_the_setting_pages_are_never_late():
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock)
    for _ in range(5):
        queue.note_request(nginx_received(10.0))
        clock.now += 1
    assert not queue.pages_late and queue.slots_now == 2


def test_while_pages_are_late_the_hashing_threads_take_one_slot_fewer_and_never_none():
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=True, pages_late_s=0.5)
    with queue.lock:
        queue.waiting.extend(Waiter(time.monotonic() + 100) for _ in range(3))
    queue.pages_late = True
    assert queue.threads._next(below=False) is not None and queue.busy == 1
    assert queue.threads._next(below=False) is None, "the second thread rests"
    queue.pages_late = False
    assert queue.threads._next(below=False) is not None and queue.busy == 2
    assert HashingQueue(slots=1, wait_s=3.0, native_threads=False, pages_late_s=0.5).slots_now == 1


def test_in_a_herd_only_the_threads_below_the_pages_hash_and_after_it_only_those_ahead():
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=True, nice=9)
    with queue.lock:
        queue.waiting.extend(Waiter(time.monotonic() + 100) for _ in range(3))
    assert queue.threads._next(below=True) is None, "no herd: the threads below the pages wait"
    assert queue.threads._next(below=False) is not None
    queue.due_back.extend([time.monotonic() + 60] * 100)  # a herd refused, due back in a minute
    assert queue.threads._next(below=False) is None, "a herd: the threads ahead of the pages rest"
    assert queue.threads._next(below=True) is not None and queue.busy == 2
    queue.busy = 0  # both hashes done
    queue.due_back.clear()  # and the herd gone
    assert queue.threads._next(below=True) is None, "after it, the threads below the pages wait again"
    assert queue.threads._next(below=False) is not None


def test_while_pages_are_late_a_login_is_judged_against_the_slots_left():
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, pages_late_s=0.5)
    queue.seconds_per_hash = 0.25
    queue.busy = 2
    queue.waiting.extend(Waiter(clock.now + 100) for _ in range(16))  # 2 s of hashing on two slots
    assert queue.refusal() is None
    queue.pages_late = True  # 4 s on one
    assert queue.refusal() is not None


def test_retry_after_is_the_time_the_queue_needs_to_drain_spread_up_to_twice_that():
    assert retry_after_s(queued=20, slots=2, seconds_per_hash=0.3, spread=1.0) == 3
    assert retry_after_s(queued=20, slots=2, seconds_per_hash=0.3, spread=2.0) == 6
    assert retry_after_s(queued=0, slots=2, seconds_per_hash=0.3, spread=1.5) == 1


def test_a_refusal_from_a_long_queue_asks_for_a_longer_wait_than_one_from_a_short_queue():
    def refusal_after(queued: int) -> int:
        queue = HashingQueue(slots=1, wait_s=1.0, native_threads=False, spread=lambda: 1.0)
        queue.seconds_per_hash = 0.5
        queue.busy = 1
        queue.waiting.extend(Waiter(time.monotonic() + 10) for _ in range(queued))
        with pytest.raises(Busy) as refused:
            queue.run(slow_hash(0.01))
        return refused.value.retry_after

    assert refusal_after(4) < refusal_after(20) == 11


def test_a_refusal_asks_for_time_enough_for_everyone_refused_within_the_wait():
    """Those refused lately come back too: a refusal's wait covers their hashes as well, so a herd told to
    come back returns spread over the time its hashes take, not all within a few seconds."""
    clock = Clock()
    queue = HashingQueue(slots=2, wait_s=3.0, native_threads=False, clock=clock, spread=lambda: 1.0)
    queue.seconds_per_hash = 0.2
    answers = [queue.busy_refusal().retry_after for _ in range(50)]
    assert answers[0] == 1 and answers[-1] == 5, "the 50th refused is told 50 hashes on 2 slots: 5 s"
    clock.now += 3.5
    assert queue.busy_refusal().retry_after == 1, "refusals older than the wait are forgotten"


def test_an_answer_that_hashed_says_where_its_time_went(app):
    add_users(app, "alice")
    response = Browser(app.test_client()).login("alice", PASSWORD)
    parts = dict(part.split(";dur=") for part in response.headers["Server-Timing"].split(", "))
    assert set(parts) == {"before", "wait", "hash", "back", "after"}
    assert float(parts["hash"]) > 0
    assert "Server-Timing" not in app.test_client().get("/").headers


# Under gevent, as uWSGI serves it: a slot goes from one hash to the next without the event loop.

UNDER_GEVENT = """
from gevent import monkey

monkey.patch_all()
import json, time
import gevent
from tweepy.hashing import HashingQueue

sleep = monkey.get_original("time", "sleep")  # a native thread's own sleep, not a greenlet's
queue = HashingQueue(slots=2, wait_s=5.0, native_threads=True)
started = []

def work(i):
    started.append(time.monotonic())
    sleep(0.1)
    return i

def hold_the_loop(seconds):  # a greenlet that never yields, as a busy page thread is to the loop
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        pass

begun = time.monotonic()
logins = [gevent.spawn(queue.run, work, i) for i in range(6)]
gevent.spawn(hold_the_loop, 1.0)
gevent.joinall(logins, raise_error=True)
print(json.dumps({"results": [g.value for g in logins], "last_start_s": max(started) - begun, "busy": queue.busy}))
"""


def test_under_gevent_a_hashing_thread_takes_the_next_hash_while_the_event_loop_is_held():
    """Six hashes of 0.1 s on two slots, queued while one greenlet holds the event loop for a second: the
    threads start the last of them within about 0.2 s, not once the loop is free, and every answer
    reaches its own request."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-c", UNDER_GEVENT], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["results"] == list(range(6))
    assert seen["last_start_s"] < 0.8
    assert seen["busy"] == 0


IMPORTS_BY_THREAD = """
from gevent import monkey

monkey.patch_all()
import json, sys
import gevent

get_native_id = monkey.get_original("threading", "get_native_id")
imported_on = []  # (native thread id, module) of every import the finders were asked for


class Recorder:
    def find_spec(self, name, path=None, target=None):
        imported_on.append((get_native_id(), name))
        return None  # the next finder imports it


main = get_native_id()
assert "setproctitle" not in sys.modules and "legacycrypt" not in sys.modules
sys.meta_path.insert(0, Recorder())
from tweepy.hashing import HashingQueue
from tweepy.passwords import LIBRARIES

newcomers = HashingQueue(slots=2, wait_s=5.0, native_threads=True, nice=19)
known = HashingQueue(slots=2, wait_s=5.0, native_threads=True, nice=19, herd_of=newcomers)
hash_at_cost_4 = LIBRARIES["libxcrypt"].hash
hashes = [gevent.spawn(q.run, hash_at_cost_4, "tweepy123", 4) for q in (newcomers, known) for _ in range(4)]
gevent.joinall(hashes, raise_error=True)
print(json.dumps({"hashed": sum(h.value.startswith("$2") for h in hashes),
                  "off_the_main_thread": sorted({name for tid, name in imported_on if tid != main})}))
"""


def test_a_hashing_thread_imports_nothing_so_no_import_lock_can_stop_it():
    """Under gevent the import locks are gevent's, and a native thread importing beside another can block
    on one for good: a node whose first logins then wait out their 3 s and are refused, every one after.
    So everything a hashing thread runs (naming itself, libxcrypt's hash) is imported before it starts."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-c", IMPORTS_BY_THREAD], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["hashed"] == 8
    assert seen["off_the_main_thread"] == []


def test_the_refusal_a_hash_would_get_is_known_before_queueing_it():
    clock = Clock()
    queue = HashingQueue(slots=1, wait_s=3.0, native_threads=False, clock=clock)
    assert queue.refusal() is None  # a free slot
    queue.busy = 1
    queue.seconds_per_hash = 0.9
    queue.waiting.extend(waiters(*[clock.now + 3.0] * 2))
    assert queue.refusal() is None  # third in line, started within its 3 s
    queue.waiting.extend(waiters(clock.now + 3.0))
    refusal = queue.refusal()
    assert isinstance(refusal, Busy) and refusal.retry_after >= 4  # four ahead, 0.9 s each
    assert len(queue.waiting) == 3  # asking queued nobody
    queue.waiting.clear()
    assert isinstance(queue.refusal(received_at=time.time() - 60), Busy)  # its whole wait spent at nginx
