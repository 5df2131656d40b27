"""A TCP relay that delays what it forwards, so a stage's database and cache answer as if they ran
on other hosts: the bench's ``TWEEPY_BENCH_NETWORK_DELAY_MS`` puts one in front of PostgreSQL and
one in front of Redis.

    python -m tools.netdelay --listen 127.0.0.1:15432 --to 127.0.0.1:5432 --delay-ms 1

Each chunk read from either side is written to the other ``delay`` later, in order, so every
round trip through the relay takes twice the delay more. (Linux's netem would do this in the
kernel; the kernels this project runs on do not always have it, and it needs root.) The relay
is one Python process: its own CPU is the bench's to report, apart from the servers'.
asyncio sleeps in whole milliseconds, so a delay is rounded up to one; ``round_trip_ms`` measures
what a round trip really takes through it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 65536


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived; then pass the end on
    (a half-close: the other direction may still have answers to carry)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(CHUNK):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((loop.time() + delay, b""))  # the end, after everything before it
    with contextlib.suppress(ConnectionError, OSError):
        await sender
        if writer.can_write_eof():
            writer.write_eof()


async def serve(listen: tuple[str, int], to: tuple[str, int], delay: float) -> None:
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*to)
        except OSError:
            client_writer.close()
            return
        for writer in (client_writer, server_writer):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _forward(client_reader, server_writer, delay), _forward(server_reader, client_writer, delay)
        )
        for writer in (client_writer, server_writer):
            writer.close()

    server = await asyncio.start_server(relay, *listen, backlog=1024)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@contextlib.contextmanager
def relay(to_host: str, to_port: int, delay_ms: float, port: int) -> Iterator[subprocess.Popen]:
    """A relay process on 127.0.0.1:``port`` in front of ``to_host:to_port``, stopped on leaving."""
    command = [sys.executable, "-m", "tools.netdelay", "--listen", f"127.0.0.1:{port}"]
    command += ["--to", f"{to_host}:{to_port}", "--delay-ms", str(delay_ms)]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the delay relay to {to_host}:{to_port} did not start")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def round_trip_ms(port: int, pings: int = 20) -> float:
    """The median time of a Redis PING through a relay on ``port`` (its server must speak Redis)."""
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(pings):
            started = time.perf_counter()
            connection.sendall(b"PING\r\n")
            assert connection.recv(64).startswith(b"+PONG")
            times.append(1000 * (time.perf_counter() - started))
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.netdelay", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="host:port to accept connections on")
    parser.add_argument("--to", type=_address, required=True, help="host:port to relay them to")
    parser.add_argument("--delay-ms", type=float, required=True, help="added to each direction of every exchange")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.to, args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
