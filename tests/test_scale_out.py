"""The scale-out stage's preparations: the connection budget every node shares, and the nginx
upstream over its nodes (serving it for real is in test_stages.py, as for every stage)."""

from __future__ import annotations

from tools import postgres, stages


def test_the_connection_budget_fits_when_all_pools_stay_below_the_servers_limit_less_a_reserve():
    fits, line = postgres.budget(max_connections=100, processes=4, per_process=10)
    assert fits and "= 40" in line and "= 90" in line
    assert not postgres.budget(max_connections=100, processes=10, per_process=10)[0]


def test_the_scale_out_stage_fits_the_default_postgresql_limit():
    stage = stages.get_stage(7)
    processes = stage.nodes * stage.processes
    assert postgres.budget(100, processes, stages.pool_of(stage, {}))[0]


def test_nginx_spreads_requests_over_one_server_a_node(tmp_path):
    stage = stages.get_stage(7)
    conf = stages.write_nginx_conf(stage, tmp_path, 8080).read_text()
    for node in stage.node_folders(tmp_path):
        assert f"server unix:{node / 'uwsgi.sock'} max_fails=3 fail_timeout=2s;" in conf
    assert stage.nodes == 2
    single = stages.write_nginx_conf(stages.get_stage(6), tmp_path / "six", 8080).read_text()
    assert single.count("server unix:") == 1
