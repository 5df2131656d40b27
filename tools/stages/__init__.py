"""Run any stage of the ladder: its settings, its servers, their pid files under var/.

    python -m tools.stages run N [--port P]   start stage N in the foreground; Ctrl-C stops it
    python -m tools.stages stop               stop whatever the pid files under var/ name
    python -m tools.stages list               the ladder, one line a stage

A stage is a folder ``stages/N-name/`` holding ``stage.env`` (values of the app's settings and of
how it is served), perhaps its own ``nginx.conf``, and perhaps parts, ``part-<name>.env``: the
step half-way, measured on their own (``run N --part name``). The stage model and the serving
settings live in ``model``; starting, watching and stopping the servers in ``servers``. The tests
and the benchmark start stages through ``start()`` too, each in its own var folder.
"""

from tools.stages.model import (
    APP_SERVER_ENV,
    APP_SETTING_NAMES,
    BIN,
    DEFAULT_STAGE,
    LOAD_GENERATOR_ADDRESS,
    PASSED_THROUGH,
    ROOT,
    SEED,
    SERVING_DEFAULTS,
    SERVING_SETTINGS,
    STAGES,
    VAR,
    Stage,
    all_stages,
    get_stage,
    pool_of,
    prepare_database,
    read_env_file,
    schema_head,
    stage_env,
)
from tools.stages.servers import Running, free_port, start, stop_all, write_nginx_conf

__all__ = [
    "APP_SERVER_ENV",
    "APP_SETTING_NAMES",
    "BIN",
    "DEFAULT_STAGE",
    "LOAD_GENERATOR_ADDRESS",
    "PASSED_THROUGH",
    "ROOT",
    "SEED",
    "SERVING_DEFAULTS",
    "SERVING_SETTINGS",
    "STAGES",
    "VAR",
    "Running",
    "Stage",
    "all_stages",
    "free_port",
    "get_stage",
    "pool_of",
    "prepare_database",
    "read_env_file",
    "schema_head",
    "stage_env",
    "start",
    "stop_all",
    "write_nginx_conf",
]
