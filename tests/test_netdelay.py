"""The delay relay the bench puts between the app and PostgreSQL or Redis: it forwards every
byte, in order, both ways, each direction late by its delay, and passes an end of stream on."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time

import pytest
from helpers.services import redis_url

from tools import netdelay, stages
from tools.bench import tables
from tools.bench.serving import delay_relays


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def exchange(port: int, message: bytes) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        started = time.perf_counter()
        connection.sendall(message)
        received = b""
        while len(received) < len(message):
            received += connection.recv(65536)
        return received, time.perf_counter() - started


def test_every_byte_comes_back_in_order_through_the_relay(echo_server):
    message = bytes(range(256)) * 4000  # about a megabyte: many chunks each way
    port = stages.free_port()
    with netdelay.relay(*echo_server, 1, port):
        received, _ = exchange(port, message)
    assert received == message


def test_a_round_trip_through_the_relay_takes_at_least_twice_its_delay(echo_server):
    port = stages.free_port()
    with netdelay.relay(*echo_server, 20, port):
        _, seconds = exchange(port, b"ping")
    assert seconds >= 0.040


def test_the_end_of_a_stream_is_passed_on(echo_server):
    port = stages.free_port()
    with netdelay.relay(*echo_server, 1, port), socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"last words")
        c.shutdown(socket.SHUT_WR)
        received = b""
        while data := c.recv(65536):  # the echo server sees the end, answers, and closes too
            received += data
    assert received == b"last words"


def test_the_bench_points_a_networked_stage_at_relays_and_measures_their_round_trip():
    stage = stages.get_stage(7)
    stage.settings = {**stage.settings, "TWEEPY_CACHE_URL": redis_url()}
    env = {"TWEEPY_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/tweepy_bench"}
    with contextlib.ExitStack() as relays:
        network = delay_relays(1, stage, env, relays)
        assert len(network["pids"]) == 2
        assert ":5432/" not in env["TWEEPY_DATABASE_URL"] and env["TWEEPY_DATABASE_URL"].endswith("/tweepy_bench")
        assert env["TWEEPY_CACHE_URL"].startswith("redis://127.0.0.1:") and env["TWEEPY_CACHE_URL"] != redis_url()
        assert network["round_trip_ms"] >= 2


def test_a_report_says_which_stages_ran_behind_delay_relays():
    network = {"round_trip_ms": 2.2, "delay_ms_each_way": 1, "relay_cpu_s": 3.5}
    delayed = {"stage": 7, "name": "scale-out", "network": network}
    lines = tables.network_lines({"stages": [delayed, {"stage": 6, "name": "vertical"}]})
    assert len(lines) == 1 and "7 scale-out: 2.2 ms a round trip to Redis (1 ms added each way)" in lines[0]
    assert tables.network_lines({"stages": [{"stage": 6, "name": "vertical"}]}) == []
