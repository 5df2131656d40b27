"""The cold start and the herds of ``make bench``, loaded beside the protocol on a freshly started stage
(``locust -f locustfile.py,tools/bench/cold_shape.py --headless -H URL``):

1. **Cold start**: ``TWEEPY_BENCH_COLD_USERS`` users arrive at ``TWEEPY_BENCH_COLD_RATE`` a second on
   empty caches; once every one has logged in, ``TWEEPY_BENCH_COLD_WINDOWS`` windows of
   ``TWEEPY_BENCH_WINDOW`` seconds are each judged with the bar.
2. **Herd**: ``TWEEPY_BENCH_HERD`` times those users at once for one window, its goodput counted in
   completed protocol tasks; then the herd's own visitors leave at once, and windows of
   ``TWEEPY_BENCH_RECOVERY_WINDOW`` seconds are judged until one meets the bar (at most
   ``TWEEPY_BENCH_RECOVERY_LIMIT`` seconds): how long the stage takes to return under it.
   ``TWEEPY_BENCH_HERDS`` herds in all, each after the last one's way back and a window at the users;
   their figures are medians, with each herd's own.

Results go to ``TWEEPY_BENCH_OUT``; ``"state": "done"`` only when all of it ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from locust import LoadTestShape

from tools.bench.figures import cold_summary, herd_figures, herds_summary, window_figures
from tools.bench.procfs import cpu_seconds, process_tree
from tools.protocol import FIRST_LOGIN, bar_from_env, from_locust, numbers, setting


class ColdStartAndHerd(LoadTestShape):
    """Users arriving briskly on a fresh stage, judged window by window; then a herd, and the way back."""

    def __init__(self) -> None:
        super().__init__()
        self.users = setting("TWEEPY_BENCH_COLD_USERS")
        self.rate = setting("TWEEPY_BENCH_COLD_RATE")
        self.windows = setting("TWEEPY_BENCH_COLD_WINDOWS")
        self.window = setting("TWEEPY_BENCH_WINDOW")
        self.herd_users = max(self.users + 1, round(self.users * setting("TWEEPY_BENCH_HERD")))
        self.herds = setting("TWEEPY_BENCH_HERDS")
        self.recovery_window = setting("TWEEPY_BENCH_RECOVERY_WINDOW")
        self.recovery_limit = setting("TWEEPY_BENCH_RECOVERY_LIMIT")
        self.ramp_limit = setting("TWEEPY_BENCH_RAMP_LIMIT")
        self.bar = bar_from_env()
        self.out = Path(setting("TWEEPY_BENCH_OUT"))
        self.servers = list(numbers(setting("TWEEPY_BENCH_SERVER_PIDS")))
        self.cores = os.cpu_count() or 1
        self.phase, self.phase_started, self.began = "start", 0.0, 0.0
        self.returned_at = 0.0  # when the herd ended and the users went back to ``users``
        self.before_herd: set[int] = set()  # the visitors running when the herd came (ids of locust users)
        self.cpu_at_start: tuple[float, float] = (0.0, 0.0)
        # ``herd`` and ``recovery``: the herd under way, or the last; ``herds``: each one over, with its figures.
        self.result: dict = {"users": self.users, "rate": self.rate, "windows": [], "herd": None, "recovery": []}
        # ``settled``: the window at the users before each herd but the first.
        self.result["herds"], self.result["settled"] = [], []
        self.state = "running"

    def tick(self):
        now = time.monotonic()
        if self.phase == "start":
            self.began = now
            self._enter("ramp", now)
        elif self.phase == "ramp":
            self._ramp(now)
        elif now - self.phase_started >= self._length():
            self._end_window(now)
        if self.state == "done":
            self._write()
            return None
        self._write()
        if self.phase == "herd":
            return self.herd_users, self.herd_users  # all at once
        if self.phase in ("recovery", "settle"):
            # In one step: the herd left by itself (``_herd_leaves``), and a lower rate would have locust
            # step down from the herd's users, respawning visitors to fill each step.
            return self.users, self.herd_users
        return self.users, self.rate

    def _length(self) -> float:
        return self.recovery_window if self.phase == "recovery" else self.window

    def _ramp(self, now: float) -> None:
        logins = self.runner.stats.get(FIRST_LOGIN, "POST")
        if self.runner.user_count >= self.users and logins.num_requests >= self.users:
            self.result["ramp"] = {"ramp_s": round(now - self.phase_started, 1), **self._judged(now)}
            self._enter("window", now)
        elif now - self.phase_started > self.ramp_limit:
            self.result["ramp"] = {"ramp_s": round(now - self.phase_started, 1), "problem": "not finished"}
            self._finish()

    def _enter(self, phase: str, now: float) -> None:
        self.phase, self.phase_started = phase, now
        self.runner.stats.reset_all()
        servers = process_tree(self.servers)
        self.cpu_at_start = (cpu_seconds(servers), cpu_seconds(process_tree([os.getpid()])))

    def _judged(self, now: float) -> dict:
        by_type, total = from_locust(self.runner.stats)
        servers = process_tree(self.servers)
        server_cpu = cpu_seconds(servers) - self.cpu_at_start[0]
        generator_cpu = cpu_seconds(process_tree([os.getpid()])) - self.cpu_at_start[1]
        seconds = now - self.phase_started
        window = window_figures(by_type, total, seconds, server_cpu, generator_cpu, self.cores, self.bar)
        return {**window, "users_running": self.runner.user_count}

    def _end_window(self, now: float) -> None:
        window = self._judged(now)
        if self.phase == "window":
            self.result["windows"].append(window)
            if len(self.result["windows"]) < self.windows:
                self._enter("window", now)
            else:
                self.result["cold"] = cold_summary(self.result["windows"])
                self._herd_comes(now)
        elif self.phase == "settle":
            self.result["settled"].append(window)
            self._herd_comes(now)
        elif self.phase == "herd":
            self.result["herd"] = {"users": self.herd_users, **window}
            self._herd_leaves()
            self.returned_at = now
            self._enter("recovery", now)
        else:
            window["ended_s_after_return"] = round(now - self.returned_at, 1)
            self.result["recovery"].append(window)
            if window["met"] or now - self.returned_at >= self.recovery_limit:
                self._herd_over(now)
            else:
                self._enter("recovery", now)

    def _herd_comes(self, now: float) -> None:
        self.before_herd = {id(user) for user in self._visitors()}
        self.result["herd"], self.result["recovery"] = None, []
        self._enter("herd", now)

    def _herd_over(self, now: float) -> None:
        """The way back is over: the herd's figures kept, then the next herd, or the end."""
        herd, recovery = self.result["herd"], self.result["recovery"]
        figures = herd_figures(self.result["windows"], herd, recovery)
        self.result["herds"].append({"herd": herd, "recovery": recovery, "figures": figures})
        self.result["herd_figures"] = herds_summary([h["figures"] for h in self.result["herds"]])
        if len(self.result["herds"]) < self.herds:
            # A window at the users first: the next herd meets a stage as steady as the first did, not
            # one whose refused logins are still coming back.
            self._enter("settle", now)
        else:
            self._finish()

    def _visitors(self) -> list:
        # Locust keeps each running user as its greenlet's first argument (a dead one's args are emptied).
        return [greenlet.args[0] for greenlet in self.runner.user_greenlets if greenlet.args]

    def _herd_leaves(self) -> None:
        """The herd's own visitors go, mid-request if need be, as people closing a tab: left to locust,
        it would stop any visitors at all, a few a second, so the load would stay above the users
        for minutes, and the herd's newcomers who stayed would still need their first logins. A master
        of locust's worker processes holds no users: there the workers stop any, all at once."""
        for user in self._visitors():
            if id(user) not in self.before_herd:
                user.stop(force=True)

    def _finish(self) -> None:
        self.state = self.phase = "done"

    def _write(self) -> None:
        data = {
            "state": self.state,
            "phase": self.phase,
            "seconds_in_phase": round(time.monotonic() - self.phase_started),
            "users": self.runner.user_count if self.runner else 0,
            **self.result,
        }
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.out)
