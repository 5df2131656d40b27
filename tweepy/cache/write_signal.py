"""``WriteSignal``: a counter of committed writes that every process on one host shares.

With ``CACHE_WRITE_SIGNAL`` on SQLite, a write bumps it before its response leaves, and every
request of ``LocalCache`` compares it with the value its process last saw: a process that sees it
move replays the invalidation log first, so every process sees every committed write at its next
request. See docs/caching.md.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct

from sqlalchemy.engine import make_url


class WriteSignal:
    """A counter shared by every process on this host: a file of eight bytes, mapped into memory.

    Writers bump it (under a file lock: writes are few) once their transaction has committed;
    readers compare it with the value they last saw. Only a change matters, never its size, so a
    file left over from another database costs one needless catch-up, no more.
    """

    SIZE = struct.calcsize("Q")

    def __init__(self, path: str) -> None:
        self.descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if os.fstat(self.descriptor).st_size < self.SIZE:
            os.ftruncate(self.descriptor, self.SIZE)  # zeros; a second process doing the same changes nothing
        self.map = mmap.mmap(self.descriptor, self.SIZE)

    @classmethod
    def beside(cls, database_url: str) -> WriteSignal | None:
        """The signal of a SQLite database file (``<database>-writes``); None for other databases."""
        url = make_url(database_url)
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return cls(os.path.realpath(url.database) + "-writes")

    def value(self) -> int:
        # One aligned eight-byte load: a reader sees the old count or the new one.
        return struct.unpack_from("Q", self.map)[0]

    def bump(self) -> int:
        """Count one more write; returns the count it replaced."""
        fcntl.flock(self.descriptor, fcntl.LOCK_EX)
        try:
            before = self.value()
            struct.pack_into("Q", self.map, 0, before + 1)
            return before
        finally:
            fcntl.flock(self.descriptor, fcntl.LOCK_UN)
