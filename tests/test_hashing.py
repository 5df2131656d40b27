"""Passwords are hashed in turns, and nobody waits long for a turn: a login that cannot
start hashing in time is told at once that the site is busy (503), and no hash is made
for a request that has already waited too long."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from helpers.browser import Browser
from helpers.pages import errors
from helpers.stored import PASSWORD, add_users

from tools.bench.procfs import thread_cpu_seconds
from tweepy import passwords
from tweepy.errors import Busy
from tweepy.passwords import HASHING_THREAD, REQUEST_START, HashingQueue


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
    queue.waiting = 8  # two seconds of hashing ahead
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


def test_a_registration_that_cannot_hash_in_time_stores_nothing(app):
    client = app.test_client()
    client.environ_base[REQUEST_START] = f"{time.time() - 60:.3f}"
    response = Browser(client).register("carol")
    assert response.status_code == 503
    assert Browser(app.test_client()).login("carol").status_code == 401


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
