"""Run any stage of the ladder: its settings, its servers, their pid files under var/.

    python -m tools.stages run N [--port P]   start stage N in the foreground; Ctrl-C stops it
    python -m tools.stages stop               stop whatever the pid files under var/ name
    python -m tools.stages list               the ladder, one line a stage

A stage is a folder ``stages/N-name/`` holding ``stage.env``: values for the
app's settings (declared in ``tweepy/config.py``) and for how the stage is
served (``SERVING_SETTINGS`` in ``model``, read by this runner only), and, when a
stage needs a different front server, its own ``nginx.conf``. A step that
changes several things at once may also hold parts, ``part-<name>.env``: the
settings of the step half-way, measured by the bench on their own so that each
half's effect shows (``run N --part name`` serves one). The runner
passes processes, gevent and the listen queue to uWSGI itself, so one
``uwsgi.ini`` serves every stage. The tests and the benchmark start stages
through ``start()`` too, each in its own var folder. The stage model lives
in ``model``, process supervision in ``servers``.
"""

from tools.stages.model import (
    APP_SERVER_ENV,
    APP_SETTING_NAMES,
    BIN,
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
