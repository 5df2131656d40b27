"""The scale-out stage's preparations: the connection budget every node shares, and the nginx
upstream over its nodes (serving it for real is in test_stages.py, as for every stage)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.http import Visitor, logged_in, worker_of
from helpers.postgres import fresh_database
from sqlalchemy import create_engine, func, select

from tools import services, stages
from tweepy.models import Tweet


def test_the_connection_budget_fits_when_all_pools_stay_below_the_servers_limit_less_a_reserve():
    fits, line = services.budget(max_connections=100, processes=4, per_process=10)
    assert fits and "= 40" in line and "= 90" in line
    assert not services.budget(max_connections=100, processes=10, per_process=10)[0]


def test_the_scale_out_stage_fits_the_default_postgresql_limit():
    stage = stages.get_stage(7)
    processes = stage.nodes * stage.processes
    assert services.budget(100, processes, stages.pool_of(stage, {}))[0]


def test_nginx_spreads_requests_over_one_server_a_node(tmp_path):
    stage = stages.get_stage(7)
    conf = stages.write_nginx_conf(stage, tmp_path, 8080).read_text()
    for node in stage.node_folders(tmp_path):
        assert f"server unix:{node / 'uwsgi.sock'} max_fails=3 fail_timeout=2s;" in conf
    assert stage.nodes == 2
    single = stages.write_nginx_conf(stages.get_stage(6), tmp_path / "six", 8080).read_text()
    assert single.count("server unix:") == 1


def test_nginx_keeps_each_browser_on_one_node_only_with_node_affinity(tmp_path):
    stage = stages.get_stage(7)
    spread = stages.write_nginx_conf(stage, tmp_path / "spread", 8080).read_text()
    stage.settings["TWEEPY_NODE_AFFINITY"] = "true"
    kept = stages.write_nginx_conf(stage, tmp_path / "kept", 8080).read_text()
    assert "hash $browser consistent;" in kept
    assert "hash $browser" not in spread


# --- losing a node, for real ----------------------------------------------------------


WRITERS, TIME_LIMIT = 4, 60


@pytest.fixture
def scaled_out(tmp_path):
    """Stage 7 on a fresh PostgreSQL database, every answer naming its node and process."""
    with serving_stage_7(tmp_path) as served:
        yield served


@contextmanager
def serving_stage_7(tmp_path, **serving: str):
    stage = stages.get_stage(7)
    stage.settings.update({f"TWEEPY_{name}": value for name, value in serving.items()})
    with fresh_database("nodes") as database:
        env = {
            "TWEEPY_DATABASE_URL": database,
            "TWEEPY_INSTANCE_PATH": str(tmp_path / "instance"),
            "TWEEPY_BCRYPT_LOG_ROUNDS": "4",
            "TWEEPY_WORKER_HEADER": "true",
            "TWEEPY_CACHE_KEY_PREFIX": f"tweepy-test-{uuid.uuid4().hex[:8]}:",
        }
        seed = ["--users", "20", "--tweets", "100", "--follows", "3"]
        with stages.start(stage, port=stages.free_port(), var=tmp_path / "var", env=env, seed=seed) as running:
            running.env = stages.stage_env(stage, 0, env)
            yield running, database


@pytest.mark.integration
def test_nginx_routes_around_a_lost_node_no_acknowledged_write_is_lost_and_the_node_rejoins(scaled_out):
    running, database = scaled_out
    node = dict(running.children)["uwsgi-node1"]
    command = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")[:-1]
    run = uuid.uuid4().hex[:6]
    acknowledged, failures, lock = [], [], threading.Lock()
    deadline = time.monotonic() + TIME_LIMIT

    def writer(k: int) -> None:
        me = logged_in(running.url, f"user{k + 1}")
        me.get("/tweets/")
        for i in range(40):
            if time.monotonic() > deadline:
                return
            text = f"{run} writer {k} tweet {i}"
            try:
                answer = me.post("/tweets/", {"tweet": text})
            except OSError as error:
                answer = error
            with lock:
                (acknowledged if getattr(answer, "status_code", None) == 303 else failures).append(text)
            time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    os.killpg(node.pid, signal.SIGKILL)  # the node's master and its workers, as a host going away
    node.wait(10)
    for thread in threads:
        thread.join(TIME_LIMIT + 10)

    assert len(acknowledged) >= WRITERS * 40 * 0.9, f"{len(failures)} writes failed while a node was lost"
    engine = create_engine(database)
    try:
        with engine.connect() as connection:
            query = select(Tweet.text, func.count()).where(Tweet.text.like(f"{run} %")).group_by(Tweet.text)
            stored = dict(connection.execute(query).all())
    finally:
        engine.dispose()
    assert all(stored.get(text) == 1 for text in acknowledged), "an acknowledged write was lost or doubled"
    assert all(count == 1 for count in stored.values())
    assert set(stored) <= set(acknowledged) | set(failures)

    # The node comes back as it was started, and nginx sends it requests again.
    with open(running.var / "uwsgi-node1.log", "ab") as log:
        back = subprocess.Popen(command, env=running.env, cwd=stages.ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    running.children = [(name, back if name == "uwsgi-node1" else process) for name, process in running.children]
    assert reaches_node(logged_in(running.url, "user9"), back.pid, within=20), "no request reached the node back"


@pytest.mark.integration
def test_with_node_affinity_a_logged_in_browser_stays_on_one_node_and_the_rest_are_spread(tmp_path):
    with serving_stage_7(tmp_path, NODE_AFFINITY="true") as (running, _database):
        masters = {process.pid: name for name, process in running.children if name.startswith("uwsgi-node")}

        def node_of(response) -> str:
            worker = int(worker_of(response).rsplit(":", 1)[1])
            return masters[int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])]

        homes = []
        for k in range(1, 17):
            visitor = logged_in(running.url, f"user{k}")
            nodes = {node_of(visitor.get("/tweets/")) for _ in range(6)}
            assert len(nodes) == 1, f"user{k}'s pages were served by {sorted(nodes)}"
            homes.append(nodes.pop())
        assert set(homes) == set(masters.values()), "browsers are kept on every node, not one"
        strangers = {node_of(Visitor(running.url).get("/")) for _ in range(10)}
        assert strangers == set(masters.values()), "a browser yet to log in goes round robin"


def reaches_node(visitor, master_pid: int, within: float) -> bool:
    """Whether one of the node's workers answers the visitor's pages within ``within`` seconds."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        workers = subprocess.run(["pgrep", "-P", str(master_pid)], capture_output=True, text=True).stdout.split()
        if int(worker_of(visitor.get("/tweets/")).rsplit(":", 1)[1]) in set(map(int, workers)):
            return True
        time.sleep(0.05)
    return False


def test_the_soak_budget_is_the_caches_of_every_process_of_the_stage():
    from tools import soak

    six, four, two = stages.get_stage(6), stages.get_stage(4), stages.get_stage(2)
    per_process = (256 + 64) * 1.0  # CACHE_BYTES and FRAGMENT_CACHE_BYTES, MiB
    assert soak.budget_mb(six) == six.processes * per_process
    assert soak.budget_mb(four) == 4 * per_process
    assert soak.budget_mb(two) == 0
