"""Faults hit a stage serving writes, and no acknowledged write is lost or doubled.

Writers post unique tweets through nginx + uWSGI and write down every answer.
After the run the SQLite file is read directly: every acknowledged tweet (303)
is stored exactly once, and nothing is stored that was never acknowledged or
in flight when a fault hit (those may be stored or not, but never twice).

The faults: a uWSGI worker killed with SIGKILL (its in-flight requests fail;
the master respawns it), a chain reload of uWSGI (its master FIFO's "c": one
worker at a time finishes its requests and is replaced, so there is always
someone to serve) and an nginx reload (SIGHUP: new workers take new
connections, old ones finish theirs). The graceful reloads must fail nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from helpers.http import logged_in, worker_of
from helpers.stack import app_servers_ready, start_stage, stored_tweet_counts, wait_until

pytestmark = pytest.mark.integration

WRITERS, TWEETS_EACH = 8, 25
# While a fault is still under way the writers keep going, up to this many tweets each,
# pausing between tweets so a slow reload does not turn into a flood of writes.
MOST_TWEETS_EACH = 400
PAUSE_DURING_FAULT = 0.05
TIME_LIMIT = 90


@pytest.fixture(scope="module", params=[4, 6], ids=lambda n: f"stage{n}")
def served(request, tmp_path_factory):
    with start_stage(request.param, tmp_path_factory.mktemp(f"faults{request.param}")) as running:
        yield running


class WriteAudit:
    """Writers posting at once, each answer written down: acknowledged (303) or in doubt."""

    def __init__(self, running) -> None:
        self.running = running
        self.run = uuid.uuid4().hex[:8]
        self.acknowledged: set[str] = set()
        self.in_doubt: dict[str, str] = {}  # text -> what the writer got instead of a 303
        self.lock = threading.Lock()
        self.fault_under_way = threading.Event()
        self.deadline = time.monotonic() + TIME_LIMIT

    @property
    def answered(self) -> int:
        return len(self.acknowledged) + len(self.in_doubt)

    def writer(self, k: int) -> None:
        me = logged_in(self.running.url, f"user{k + 1}")
        me.get("/tweets/")
        for i in range(MOST_TWEETS_EACH):
            if (i >= TWEETS_EACH and not self.fault_under_way.is_set()) or time.monotonic() > self.deadline:
                return
            text = f"{self.run} writer {k} tweet {i}"
            try:
                status = me.post("/tweets/", {"tweet": text}).status_code
            except requests.RequestException as error:
                status = f"{type(error).__name__}: {str(error)[:120]}"
            with self.lock:
                if status == 303:
                    self.acknowledged.add(text)
                else:
                    self.in_doubt[text] = str(status)
            if i >= TWEETS_EACH:
                time.sleep(PAUSE_DURING_FAULT)

    def run_with(self, fault=None) -> None:
        """Write; with a ``fault``, start it once a third of the tweets are answered, and keep
        writing until it is over (``fault`` returns when the stage has recovered)."""
        with ThreadPoolExecutor(WRITERS) as pool:
            futures = [pool.submit(self.writer, k) for k in range(WRITERS)]
            if fault is not None:
                wait_until(lambda: self.answered >= WRITERS * TWEETS_EACH // 3, 30, "a third of the tweets answered")
                self.fault_under_way.set()
                answered_before = self.answered
                try:
                    fault(self.running)
                finally:
                    self.fault_under_way.clear()
                assert self.answered > answered_before, "no tweet was posted while the fault was under way"
            for future in futures:
                future.result(timeout=TIME_LIMIT + 30)

    def check(self) -> None:
        stored = stored_tweet_counts(self.running, self.run + " ")
        assert self.answered >= WRITERS * TWEETS_EACH
        assert {t for t in self.acknowledged if stored.get(t) != 1} == set(), "acknowledged, stored other than once"
        assert {t for t, n in stored.items() if n > 1} == set(), "stored twice"
        assert set(stored) <= self.acknowledged | set(self.in_doubt), "stored, never posted"


def audit(running, fault=None, record=None) -> WriteAudit:
    work = WriteAudit(running)
    work.run_with(fault)
    work.check()
    if record is not None:
        record("posted", work.answered)
        record("failed", len(work.in_doubt))
        record("failures", sorted(set(work.in_doubt.values())))
    print(f"\n{running.stage.name}: {work.answered} posted, {len(work.in_doubt)} failed {set(work.in_doubt.values())}")
    return work


# --- the faults ---------------------------------------------------------------------


def kill_one_worker(running) -> None:
    victim = running.workers()[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(app_servers_ready(running, old={victim}), 30, "the killed worker respawned")


def reload_app_servers(running) -> None:
    old = set(running.workers())
    running.reload_app_servers()
    wait_until(app_servers_ready(running, old=old), 60, "every uWSGI worker replaced")


def reload_front(running) -> None:
    old = set(running.front_workers())
    running.reload_front()
    wait_until(lambda: not old & set(running.front_workers()), 30, "every old nginx worker gone")


# --- the audits -----------------------------------------------------------------------


def test_every_acknowledged_tweet_is_stored_once_under_concurrent_writers(served, record_property):
    work = audit(served, record=record_property)
    assert work.in_doubt == {}


def test_a_killed_worker_loses_only_its_in_flight_requests_and_is_replaced(served, record_property):
    work = audit(served, kill_one_worker, record_property)
    # At most what one worker had in flight: one request, or each writer's under gevent.
    most_in_flight = WRITERS if int(served.stage.get("GEVENT")) else 1
    assert len(work.in_doubt) <= most_in_flight, work.in_doubt


def test_a_chain_reload_of_the_app_servers_fails_no_request(served, record_property):
    work = audit(served, reload_app_servers, record_property)
    assert work.in_doubt == {}


def test_a_reload_of_nginx_fails_no_request(served, record_property):
    work = audit(served, reload_front, record_property)
    assert work.in_doubt == {}


# --- one stuck request ----------------------------------------------------------------

BUSY_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def synchronous(tmp_path_factory):
    """Stage 4: four synchronous workers, each serving one request at a time."""
    folder = tmp_path_factory.mktemp("synchronous")
    with start_stage(4, folder, SQLITE_BUSY_TIMEOUT_MS=str(BUSY_TIMEOUT_MS)) as running:
        yield running


def test_a_write_stuck_behind_a_database_lock_holds_one_worker_while_the_others_serve(synchronous):
    """The write waits for the lock for the busy timeout, holding its worker; reads meanwhile
    are served by the other workers, and the stuck write ends in a 503 that stored nothing."""
    writer, reader = logged_in(synchronous.url, "user1"), logged_in(synchronous.url, "user2")
    writer.get("/tweets/")
    blocker = sqlite3.connect(synchronous.database)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(writer.post, "/tweets/", {"tweet": "posted while the database is locked"})
            time.sleep(0.5)  # the write reaches its worker and waits for the lock
            served_by = set()
            for path in ["/tweets/", "/users/", "/users/user3/"] * 8:
                page = reader.get(path)
                assert page.status_code == 200, path
                served_by.add(worker_of(page))
            assert not stuck.done(), "the write was not held: the test proved nothing"
            answer = stuck.result(timeout=BUSY_TIMEOUT_MS / 1000 + 30)
    finally:
        blocker.rollback()
        blocker.close()
    assert len(served_by) >= 2, "the reads were all served by one worker"
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
    assert stored_tweet_counts(synchronous, "posted while the database is locked") == {}


def slow_client(url: str, request_start: bytes) -> socket.socket:
    """A client that sends the start of a request and then nothing: nginx waits for the rest."""
    host, port = url.split("//")[1].rstrip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(request_start)
    return sock


def test_slow_clients_are_held_by_nginx_not_by_the_workers(synchronous):
    """Twice as many slow clients as workers, half of them uploading a body byte by byte and
    half still sending headers: nginx buffers them all, and every worker stays free."""
    upload = b"POST /tweets/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    upload += b"Content-Length: 100000\r\n\r\ntweet=slow"
    headers = b"GET /tweets/ HTTP/1.1\r\nHost: x\r\nX-Slow: "
    count = synchronous.stage.processes
    clients = [slow_client(synchronous.url, upload) for _ in range(count)]
    clients += [slow_client(synchronous.url, headers) for _ in range(count)]
    try:
        reader = logged_in(synchronous.url, "user4")
        for path in ["/tweets/", "/users/", "/healthz"] * 5:
            assert reader.get(path).status_code == 200, path
        for sock in clients:
            sock.sendall(b"a")
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)  # still waiting: no answer, not closed
    finally:
        for sock in clients:
            sock.close()
