"""The capacity search of ``make bench``, loaded beside the protocol:

    locust -f locustfile.py,tools/bench_shape.py --headless -H URL

A locust load shape that steps the number of users up (``TWEEPY_BENCH_STEPS``)
and, at each step:

1. ramps the new users up at ``TWEEPY_BENCH_SPAWN_RATE`` users a second (a
   rate the machine can hash their first logins at),
2. waits until every user has logged in once (the protocol names that first
   login ``POST / [first login]``) and records the ramp: how long it took and
   how slow those logins were,
3. resets the statistics and measures a window of ``TWEEPY_BENCH_WINDOW``
   seconds of the steady protocol, in which logins still happen at the
   protocol's own rate,
4. records the step (throughput, latency, failures, server CPU per request,
   the load generator's own CPU, peak server memory) in ``TWEEPY_BENCH_OUT``
   and stops at the first step that misses the bar.

The server's processes are found from ``TWEEPY_BENCH_SERVER_PIDS`` (their
children included, so uWSGI workers and nginx workers count).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from locust import LoadTestShape

FIRST_LOGIN = ("POST", "/ [first login]")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- /proc: CPU time and memory of process trees ------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def process_tree(roots: list[int]) -> list[int]:
    tree, found, todo = _children(), [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, ()))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes, and of their children that exited."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / CLOCK_TICKS


def memory_mb(pids: list[int]) -> float:
    """Proportional set size: shared pages are split between the processes sharing them."""
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
        except OSError:
            try:
                total_kb += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB
            except OSError:
                pass
    return total_kb / 1024


# --- the search --------------------------------------------------------------------------------


def _env_list(name: str, default: str) -> list[int]:
    return [int(v) for v in os.environ.get(name, default).replace(",", " ").split()]


class SteppedCapacity(LoadTestShape):
    """Step up users until the bar is missed; measure each step after its logins."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = _env_list("TWEEPY_BENCH_STEPS", "25 50 100 200 300 400 600 800 1000 1200")
        self.spawn_rate = float(os.environ.get("TWEEPY_BENCH_SPAWN_RATE", "5"))
        self.window = float(os.environ.get("TWEEPY_BENCH_WINDOW", "60"))
        self.warmup = float(os.environ.get("TWEEPY_BENCH_WARMUP", "10"))
        self.ramp_limit = float(os.environ.get("TWEEPY_BENCH_RAMP_LIMIT", "600"))
        self.bar_p95_ms = float(os.environ.get("TWEEPY_BAR_P95_MS", "2000"))
        self.bar_failures = int(os.environ.get("TWEEPY_BAR_FAILURES", "0"))
        self.out = Path(os.environ.get("TWEEPY_BENCH_OUT", "bench-steps.json"))
        self.server_roots = _env_list("TWEEPY_BENCH_SERVER_PIDS", "")
        self.index = 0
        self.phase = "ramp"
        self.phase_started = time.monotonic()
        self.results: list[dict] = []
        self.window_start: dict = {}
        self.peak_memory = 0.0
        self.ramp: dict = {}

    # What the runner asks every second: how many users, how fast.
    def tick(self):
        if self.index >= len(self.steps):
            return None
        target = self.steps[self.index]
        now = time.monotonic()
        stats = self.runner.stats
        if self.phase == "ramp":
            # Statistics were reset when the last window began: the first logins
            # counted since are the new users' only.
            new_users = target - (self.steps[self.index - 1] if self.index else 0)
            logins = stats.get(FIRST_LOGIN[1], FIRST_LOGIN[0])
            if self.runner.user_count >= target and logins.num_requests >= new_users:
                self.ramp = {
                    "ramp_s": round(now - self.phase_started, 1),
                    "login_p50_ms": logins.get_response_time_percentile(0.5),
                    "login_p95_ms": logins.get_response_time_percentile(0.95),
                    "login_failures": logins.num_failures,
                }
                self._enter("warmup" if self.index == 0 and self.warmup > 0 else "window", now)
            elif now - self.phase_started > self.ramp_limit:
                self._record(target, now, failed_ramp=True)
                return None
        elif self.phase == "warmup" and now - self.phase_started >= self.warmup:
            self._enter("window", now)
        elif self.phase == "window":
            self.peak_memory = max(self.peak_memory, memory_mb(process_tree(self.server_roots)))
            if now - self.phase_started >= self.window:
                if not self._record(target, now):
                    return None
                self.index += 1
                self._enter("ramp", now)
                if self.index >= len(self.steps):
                    return None
                target = self.steps[self.index]
        self._progress(target)
        return target, self.spawn_rate

    def _enter(self, phase: str, now: float) -> None:
        self.phase, self.phase_started = phase, now
        if phase == "window":
            self.runner.stats.reset_all()
            self.peak_memory = memory_mb(process_tree(self.server_roots))
            self.window_start = self._cpu_now(now)

    def _cpu_now(self, now: float) -> dict:
        return {
            "time": now,
            "server_cpu": cpu_seconds(process_tree(self.server_roots)),
            "generator_cpu": cpu_seconds(process_tree([os.getpid()])),
        }

    def _record(self, users: int, now: float, failed_ramp: bool = False) -> bool:
        """Save the step; True when it met the bar (so the search goes on)."""
        total = self.runner.stats.total
        step = {"users": users, **self.ramp}
        if failed_ramp:
            step.update(met_bar=False, reason=f"users still logging in after {self.ramp_limit:.0f}s")
        else:
            end = self._cpu_now(now)
            seconds = end["time"] - self.window_start["time"]
            requests = total.num_requests
            server_cpu = end["server_cpu"] - self.window_start["server_cpu"]
            generator_cpu = end["generator_cpu"] - self.window_start["generator_cpu"]
            p95 = total.get_response_time_percentile(0.95) or 0
            met = requests > 0 and p95 < self.bar_p95_ms and total.num_failures <= self.bar_failures
            step.update(
                window_s=round(seconds, 1),
                requests=requests,
                rps=round(requests / seconds, 1),
                p50_ms=total.get_response_time_percentile(0.5),
                p95_ms=p95,
                p99_ms=total.get_response_time_percentile(0.99),
                failures=total.num_failures,
                server_cpu_ms_per_request=round(1000 * server_cpu / requests, 2) if requests else None,
                server_cpu_cores=round(server_cpu / seconds, 2),
                generator_cpu_cores=round(generator_cpu / seconds, 2),
                generator_cpu_share=round(generator_cpu / seconds / (os.cpu_count() or 1), 3),
                peak_server_memory_mb=round(self.peak_memory, 1),
                met_bar=met,
                by_request={
                    f"{e.method} {e.name}": {
                        "requests": e.num_requests,
                        "failures": e.num_failures,
                        "p95_ms": e.get_response_time_percentile(0.95),
                    }
                    for e in self.runner.stats.entries.values()
                },
                errors={f"{e.method} {e.name}: {e.error}": e.occurrences for e in self.runner.stats.errors.values()},
            )
        self.results.append(step)
        self._write()
        return bool(step["met_bar"])

    def _progress(self, target: int) -> None:
        total = self.runner.stats.total
        self.progress = {
            "phase": self.phase,
            "step": self.index + 1,
            "of_steps": len(self.steps),
            "target_users": target,
            "users": self.runner.user_count,
            "seconds_in_phase": round(time.monotonic() - self.phase_started),
            "rps": round(total.current_rps, 1),
            "p95_ms": total.get_current_response_time_percentile(0.95),
            "failures": total.num_failures,
        }
        self._write()

    def _write(self) -> None:
        data = {"steps": self.results, "progress": getattr(self, "progress", {})}
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.out)
