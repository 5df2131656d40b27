"""The capacity search of ``make bench``, loaded beside the protocol:

    locust -f locustfile.py,tools/bench/capacity_shape.py --headless -H URL

A locust load shape that steps the users up (``TWEEPY_BENCH_STEPS``). At each step it ramps the
new users up at ``TWEEPY_BENCH_SPAWN_RATE`` and waits until each has logged in once, at most
``TWEEPY_BENCH_RAMP_LIMIT`` s; judges the ramp with the bar, first logins included; then measures
a window of ``TWEEPY_BENCH_WINDOW`` s, judged request type by request type, and records it in
``TWEEPY_BENCH_OUT``. It stops at the first step that misses, goes back to the highest step that
met the bar and measures it again until it rests on ``TWEEPY_BENCH_CAPACITY_WINDOWS`` windows
(a lower step when their median misses), then one overload step (``TWEEPY_BENCH_OVERLOAD`` times
the capacity's users). ``"state": "done"`` only when all of this ran. Server CPU and memory are
those of ``TWEEPY_BENCH_SERVER_PIDS`` and their children. Settings are in ``tools/protocol.py``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from locust import LoadTestShape

from tools.bench.figures import judged, overload_figures, overload_users, step_verdict, window_figures
from tools.bench.headline import capacity_of, overload_as_felt, windows_of
from tools.bench.procfs import cpu_seconds, memory_mb, process_tree, thread_cpu_seconds
from tools.protocol import FIRST_LOGIN, SERVED, bar_from_env, from_locust, numbers, setting
from tweepy.hashing_threads import HASHING_THREAD

# --- the search --------------------------------------------------------------------------------


def tiers_from(text: str) -> dict[str, list[int]]:
    """'nginx=12 app=34,56' as {"nginx": [12], "app": [34, 56]}: each tier's processes, trees included."""
    tiers = {}
    for part in text.split():
        name, _, pids = part.partition("=")
        tiers[name] = list(numbers(pids))
    return tiers


class SteppedCapacity(LoadTestShape):
    """Step up users until the bar is missed, judging each step's ramp and window; then more windows at
    the capacity step, and one overload step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = numbers(setting("TWEEPY_BENCH_STEPS"))
        self.spawn_rate = setting("TWEEPY_BENCH_SPAWN_RATE")
        self.window = setting("TWEEPY_BENCH_WINDOW")
        self.warmup = setting("TWEEPY_BENCH_WARMUP")
        self.ramp_limit = setting("TWEEPY_BENCH_RAMP_LIMIT")
        self.overload_factor = setting("TWEEPY_BENCH_OVERLOAD")
        self.capacity_windows = setting("TWEEPY_BENCH_CAPACITY_WINDOWS")
        self.overload_max = setting("TWEEPY_BENCH_OVERLOAD_MAX_USERS")
        self.bar = bar_from_env()
        self.out = Path(setting("TWEEPY_BENCH_OUT"))
        self.server_roots = list(numbers(setting("TWEEPY_BENCH_SERVER_PIDS")))
        self.tiers = tiers_from(setting("TWEEPY_BENCH_TIERS"))
        self.cores = os.cpu_count() or 1
        self.state = "searching"  # then "confirming", "overload" and "done"
        self.ended = ""
        self.index = 0
        self.target = self.steps[0]
        self.previous_users = 0
        self.phase = "start"
        self.phase_started = 0.0
        self.ramp_started = 0.0
        self.results: list[dict] = []
        self.overload: dict | None = None
        self.confirming = -1  # the index of the step measured again
        self.capacity: dict | None = None
        self.ramp: dict = {}
        self.before: dict | None = None
        self.window_start: dict = {}
        self.peak_memory = 0.0
        self.progress: dict = {}

    # What the runner asks every second: how many users, how fast.
    def tick(self):
        now = time.monotonic()
        if self.phase == "start":
            self._enter("ramp", now)
        if self.phase == "ramp":
            self._ramp(now)
        elif self.phase == "warmup" and now - self.phase_started >= self.warmup:
            self._enter("window", now)
        elif self.phase == "settle" and now - self.phase_started >= max(1.0, self.warmup):
            if self.runner.user_count <= self.target:  # the users past the step have stopped
                self._enter("window", now)
        elif self.phase == "window":
            self.peak_memory = max(self.peak_memory, memory_mb(process_tree(self.server_roots)))
            if now - self.phase_started >= self.window:
                self._end_window(now)
        if self.phase == "done":
            self._write()
            return None
        self._progress()
        return self.target, self.spawn_rate

    def _ramp(self, now: float) -> None:
        # Statistics were reset when the ramp began: the first logins counted are the new users'.
        new_users = max(0, self.target - self.previous_users)
        logins = self.runner.stats.get(FIRST_LOGIN, "POST")
        elapsed = now - self.phase_started
        self.ramp = {
            "ramp_s": round(elapsed, 1),
            "ramp_complete": False,
            "first_logins": logins.num_requests,
            "first_login_p50_ms": logins.get_response_time_percentile(0.5) if logins.num_requests else None,
            "first_login_p95_ms": logins.get_response_time_percentile(0.95) if logins.num_requests else None,
            "first_login_failures": logins.num_failures,
        }
        if self.runner.user_count >= self.target and logins.num_requests >= new_users:
            self.ramp["ramp_complete"] = True
            first = self.index == 0 and self.state == "searching"
            self._enter("warmup" if first and self.warmup > 0 else "window", now)
        elif elapsed > self.ramp_limit:
            problem = (
                f"ramp not finished in {self.ramp_limit:.0f}s: {self.runner.user_count} of {self.target} users "
                f"running, {logins.num_requests} of {new_users} first logins"
            )
            self.ramp["ramp_problem"] = problem
            if self.state == "overload":  # past capacity, measure what it does anyway
                self._enter("window", now)
            else:
                self.before = self._judged_since_reset(elapsed)
                self._record(None)

    def _enter(self, phase: str, now: float) -> None:
        stats = self.runner.stats
        if phase == "window" and self.state != "confirming":
            # Everything users did since the ramp began is judged before the window's statistics start.
            self.before = self._judged_since_reset(now - self.ramp_started)
        self.phase, self.phase_started = phase, now
        if phase == "ramp":
            self.ramp_started = now
            self.before = None
            stats.reset_all()
        elif phase == "window":
            stats.reset_all()
            self.peak_memory = memory_mb(process_tree(self.server_roots))
            self.window_start = self._cpu_now(now)
            SERVED.start()

    def _judged_since_reset(self, seconds: float) -> dict:
        by_type, total = from_locust(self.runner.stats)
        return {"seconds": round(seconds, 1), **judged(by_type, total, seconds, self.bar)}

    def _cpu_now(self, now: float) -> dict:
        servers = process_tree(self.server_roots)
        return {
            "time": now,
            "server_cpu": cpu_seconds(servers),
            "hashing_threads_cpu": thread_cpu_seconds(servers, HASHING_THREAD),
            "generator_cpu": cpu_seconds(process_tree([os.getpid()])),
            "tiers": {name: cpu_seconds(process_tree(pids)) for name, pids in self.tiers.items()},
        }

    def _end_window(self, now: float) -> None:
        end = self._cpu_now(now)
        stats = self.runner.stats
        by_type, total = from_locust(stats)
        window = window_figures(
            by_type,
            total,
            end["time"] - self.window_start["time"],
            end["server_cpu"] - self.window_start["server_cpu"],
            end["generator_cpu"] - self.window_start["generator_cpu"],
            self.cores,
            self.bar,
        )
        hashing_threads_cpu = end["hashing_threads_cpu"] - self.window_start["hashing_threads_cpu"]
        if hashing_threads_cpu and total.requests:  # stages that hash on their own threads
            window["hashing_threads_cpu_ms_per_request"] = round(1000 * hashing_threads_cpu / total.requests, 3)
        if self.tiers and total.requests:
            window["tier_cpu_ms_per_request"] = {
                name: round(1000 * (end["tiers"][name] - self.window_start["tiers"][name]) / total.requests, 3)
                for name in self.tiers
            }
        window.update(
            users_running=self.runner.user_count,
            p50_ms=stats.total.get_response_time_percentile(0.5),
            p99_ms=stats.total.get_response_time_percentile(0.99),
            peak_server_memory_mb=round(self.peak_memory, 1),
            users_served=SERVED.count(),
            errors={f"{e.method} {e.name}: {e.error}": e.occurrences for e in stats.errors.values()},
        )
        self._record(window)

    def _record(self, window: dict | None) -> None:
        now = time.monotonic()
        if self.state == "confirming":
            self.results[self.confirming].setdefault("repeats", []).append(window)
            self._confirm(self.confirming, now)
            return
        met, reasons = step_verdict(self.before, window, self.ramp.get("ramp_problem"))
        if window is not None:
            window["window_met"] = window.pop("met")
        step = {
            "users": self.target,
            "spawn_rate": self.spawn_rate,
            **self.ramp,
            **(window or {}),
            "ramp": self.before,
            "met_bar": met,
        }
        if reasons:
            step["reasons"] = reasons
        if self.state == "overload":
            felt = overload_as_felt(window or {}, self.capacity)
            self.overload = {**step, **overload_figures(window or {}), **felt}
            self._finish()
            return
        self.results.append(step)
        self._write()
        if not met:
            self.ended = f"missed at {self.target} users"
        elif self.index + 1 < len(self.steps):
            self.index += 1
            self.previous_users, self.target = self.target, self.steps[self.index]
            self._enter("ramp", now)
            return
        else:
            self.ended = f"every step met the bar, up to {self.target} users"
        self._confirm(max((i for i, s in enumerate(self.results) if s["met_bar"]), default=-1), now)

    def _confirm(self, index: int, now: float) -> None:
        """Measure the step at ``index`` until it rests on enough windows; if their median misses the
        bar, the step below it; then the overload step past the capacity so found."""
        if index < 0:
            self._finish()  # no step met the bar: no capacity, nothing to overload
            return
        step = self.results[index]
        if len(windows_of(step)) < self.capacity_windows:
            if self.state != "confirming" or self.confirming != index:
                self.state, self.confirming = "confirming", index
                self.previous_users, self.target = self.runner.user_count, step["users"]
                self._enter("settle", now)
            else:
                self._enter("window", now)
            return
        best, self.capacity = capacity_of(self.results[: index + 1], self.bar)
        if best is not step:
            self._confirm(index - 1, now)
            return
        self._write()
        users = overload_users(step["users"], self.overload_factor, self.overload_max)
        if users is None:
            self._finish()
            return
        self.state = "overload"
        self.previous_users, self.target = self.runner.user_count, users
        self._enter("ramp", now)

    def _finish(self) -> None:
        self.state = self.phase = "done"
        self._write()

    def _progress(self) -> None:
        total = self.runner.stats.total
        self.progress = {
            "phase": self.phase,
            "step": {"overload": "overload", "confirming": "capacity"}.get(self.state, self.index + 1),
            "of_steps": len(self.steps),
            "target_users": self.target,
            "users": self.runner.user_count,
            "seconds_in_phase": round(time.monotonic() - self.phase_started),
            "rps": round(total.current_rps, 1),
            "p95_ms": total.get_current_response_time_percentile(0.95),
            "failures": total.num_failures,
        }
        self._write()

    def _write(self) -> None:
        data = {
            "state": self.state,
            "ended": self.ended,
            "bar": asdict(self.bar),
            "steps": self.results,
            "overload": self.overload,
            "capacity": self.capacity,
            "progress": self.progress,
        }
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.out)
