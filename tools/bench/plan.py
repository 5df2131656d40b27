"""What a bench run will do: its stages, data sizes, steps, windows and bar, from the command line
and the settings of ``tools/protocol.py``; and the locust command lines that carry it out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tools import stages
from tools.bench.figures import probe_of, protocol_qps_bound
from tools.protocol import SETTINGS, Bar, bar_from_env, numbers, setting

DEFAULTS = {s.name: s.default for s in SETTINGS}


@dataclass
class Plan:
    stages: list[int]
    users: int = DEFAULTS["TWEEPY_BENCH_USERS"]
    tweets: int = DEFAULTS["TWEEPY_BENCH_TWEETS"]
    follows: int = DEFAULTS["TWEEPY_BENCH_FOLLOWS"]
    steps: tuple[int, ...] = numbers(DEFAULTS["TWEEPY_BENCH_STEPS"])
    window_s: float = DEFAULTS["TWEEPY_BENCH_WINDOW"]
    warmup_s: float = DEFAULTS["TWEEPY_BENCH_WARMUP"]
    ramp_limit_s: float = DEFAULTS["TWEEPY_BENCH_RAMP_LIMIT"]
    overload: float = DEFAULTS["TWEEPY_BENCH_OVERLOAD"]
    capacity_windows: int = DEFAULTS["TWEEPY_BENCH_CAPACITY_WINDOWS"]
    overload_max_users: int = DEFAULTS["TWEEPY_BENCH_OVERLOAD_MAX_USERS"]
    ceiling_s: float = 15
    ceiling_users: int = DEFAULTS["TWEEPY_BENCH_CEILING_USERS"]
    network_delay_ms: float = DEFAULTS["TWEEPY_BENCH_NETWORK_DELAY_MS"]
    bcrypt_cost: int = 12
    bcrypt_probe_s: float = 5
    spawn_share: float = 0.15  # of the machine's hashing rate, for first logins in a ramp
    cold_rate: float = DEFAULTS["TWEEPY_BENCH_COLD_RATE"]
    cold_windows: int = DEFAULTS["TWEEPY_BENCH_COLD_WINDOWS"]  # 0: no cold start nor herd
    herd: float = DEFAULTS["TWEEPY_BENCH_HERD"]
    herds: int = DEFAULTS["TWEEPY_BENCH_HERDS"]
    target_share: float = DEFAULTS["TWEEPY_BENCH_TARGET_SHARE"]
    recovery_window_s: float = DEFAULTS["TWEEPY_BENCH_RECOVERY_WINDOW"]
    recovery_limit_s: float = DEFAULTS["TWEEPY_BENCH_RECOVERY_LIMIT"]
    locust_processes: int = DEFAULTS["LOCUST_PROCESSES"]
    bar: Bar = field(default_factory=Bar)
    quick: bool = False
    kept_from: str = ""  # an earlier run whose other stages this one's report keeps
    split: str = ""  # "k/n": part k of a run made in n parts, its share of the stages and a control stage
    # Settings changed from the stages' own (``--set``), for a variant measured into a folder of its own.
    variant: dict[str, str] = field(default_factory=dict)
    out: str = ""  # that folder


def quick_plan(stage_numbers: list[int]) -> Plan:
    """A smoke run: tiny data and short windows, but enough traffic (about 2,000 requests over the
    ladder's windows) that every request type of the protocol shows up, registrations (1 in 238) included."""
    return Plan(
        stages=stage_numbers,
        users=200,
        tweets=5_000,
        follows=10,
        steps=(10,),
        window_s=5,
        warmup_s=1,
        ramp_limit_s=60,
        overload=2,
        overload_max_users=20,
        ceiling_s=2,
        ceiling_users=10,
        spawn_share=0.25,  # a hash under load can cost more than the probe's, and first logins must not queue
        # The capacity's window once: measuring it again is the search's own logic, which the shape's
        # tests walk through (tests/test_locustfile.py), and would make the ladder's run twice as long.
        capacity_windows=1,
        cold_windows=1,
        herds=2,  # more than one, so that their medians are made, but no more: each adds some 15 s
        recovery_window_s=4,
        recovery_limit_s=12,
        bcrypt_probe_s=1,
        quick=True,
    )


# The plan's attributes each setting of tools/protocol.py sets (the steps are parsed apart).
ATTRIBUTES = {
    "TWEEPY_BENCH_WINDOW": "window_s",
    "TWEEPY_BENCH_WARMUP": "warmup_s",
    "TWEEPY_BENCH_RAMP_LIMIT": "ramp_limit_s",
    "TWEEPY_BENCH_OVERLOAD": "overload",
    "TWEEPY_BENCH_CAPACITY_WINDOWS": "capacity_windows",
    "TWEEPY_BENCH_OVERLOAD_MAX_USERS": "overload_max_users",
    "TWEEPY_BENCH_CEILING_USERS": "ceiling_users",
    "TWEEPY_BENCH_COLD_RATE": "cold_rate",
    "TWEEPY_BENCH_COLD_WINDOWS": "cold_windows",
    "TWEEPY_BENCH_HERD": "herd",
    "TWEEPY_BENCH_HERDS": "herds",
    "TWEEPY_BENCH_TARGET_SHARE": "target_share",
    "TWEEPY_BENCH_RECOVERY_WINDOW": "recovery_window_s",
    "TWEEPY_BENCH_RECOVERY_LIMIT": "recovery_limit_s",
    "TWEEPY_BENCH_NETWORK_DELAY_MS": "network_delay_ms",
    "LOCUST_PROCESSES": "locust_processes",
    "TWEEPY_BENCH_USERS": "users",
    "TWEEPY_BENCH_TWEETS": "tweets",
    "TWEEPY_BENCH_FOLLOWS": "follows",
}
DATA_SIZES = ("users", "tweets", "follows")  # a quick run keeps its own


def make_plan(stage_numbers: list[int], quick: bool, environ: Mapping[str, str]) -> Plan:
    """The plan for these stages; settings from the environment win, except data sizes in a quick run."""
    plan = quick_plan(stage_numbers) if quick else Plan(stages=stage_numbers)
    read = {name: environ.get(name, "").strip() for name in DEFAULTS}
    if read["TWEEPY_BENCH_STEPS"]:
        plan.steps = numbers(read["TWEEPY_BENCH_STEPS"])
    for name, attribute in ATTRIBUTES.items():
        if read[name] and not (quick and attribute in DATA_SIZES):
            setattr(plan, attribute, setting(name, environ))
    plan.bcrypt_cost = int(environ.get("TWEEPY_BCRYPT_LOG_ROUNDS", "").strip() or plan.bcrypt_cost)
    plan.bar = bar_from_env(environ)
    if not plan.steps or any(b <= a for a, b in zip(plan.steps, plan.steps[1:], strict=False)) or plan.steps[0] < 1:
        raise ValueError(f"TWEEPY_BENCH_STEPS={' '.join(map(str, plan.steps))!r}: expected users going up")
    return plan


def spawn_rate(plan: Plan, hashes_per_s: float) -> float:
    """New users a second in a ramp: a share of what the machine can hash (``Plan.spawn_share``), so first
    logins do not queue; quick runs, with their tiny data and short steps, take a larger one."""
    return max(1.0, round(plan.spawn_share * hashes_per_s, 1))


def search_time_limit(plan: Plan) -> float:
    """How long locust may run the search before it is cut short: every ramp at its limit, and the
    capacity measured again at every step on the way down (``Plan.capacity_windows``)."""
    per_step = plan.ramp_limit_s + plan.window_s + 15
    again = (plan.capacity_windows - 1) * (plan.window_s + max(1.0, plan.warmup_s) + 5)
    return plan.warmup_s + (len(plan.steps) + 1) * per_step + len(plan.steps) * again + 60


def locust_command(plan: Plan, files: str, url: str, csv, users: int | None, run_time: float) -> list[str]:
    # No trailing slash: locust joins the host and "/tweets/" itself.
    command = [str(stages.BIN / "locust"), "-f", files, "--headless", "-H", url.rstrip("/")]
    command += ["--csv", str(csv), "--only-summary", "--run-time", f"{int(run_time)}s"]
    command += ["--stop-timeout", "5", "--loglevel", "WARNING"]
    if users is not None:
        command += ["-u", str(users), "-r", str(users)]
    if plan.locust_processes > 1:
        command += ["--processes", str(plan.locust_processes)]
    return command


def shape_environment(plan: Plan, out, server_pids: list[int], rate: float) -> dict[str, str]:
    """The settings the load shape and the protocol read inside locust."""
    return {
        "TWEEPY_SEED_USERS": str(plan.users),
        "TWEEPY_BENCH_STEPS": " ".join(map(str, plan.steps)),
        "TWEEPY_BENCH_SPAWN_RATE": str(rate),
        "TWEEPY_BENCH_WINDOW": str(plan.window_s),
        "TWEEPY_BENCH_WARMUP": str(plan.warmup_s),
        "TWEEPY_BENCH_RAMP_LIMIT": str(plan.ramp_limit_s),
        "TWEEPY_BENCH_OVERLOAD": str(plan.overload),
        "TWEEPY_BENCH_CAPACITY_WINDOWS": str(plan.capacity_windows),
        "TWEEPY_BENCH_OVERLOAD_MAX_USERS": str(plan.overload_max_users),
        "TWEEPY_BENCH_OUT": str(out),
        "TWEEPY_BENCH_SERVER_PIDS": " ".join(map(str, server_pids)),
        "TWEEPY_BAR_P95_MS": str(plan.bar.max_p95_ms),
        "TWEEPY_BAR_FAILURES": str(plan.bar.max_failures),
        "TWEEPY_BAR_MIN_REQUESTS": str(plan.bar.min_requests),
    }


def cold_environment(plan: Plan, out, server_pids: list[int], users: int) -> dict[str, str]:
    """The settings the cold start's shape (``tools/bench/cold_shape.py``) reads inside locust."""
    return {
        "TWEEPY_SEED_USERS": str(plan.users),
        "TWEEPY_BENCH_COLD_USERS": str(users),
        "TWEEPY_BENCH_COLD_RATE": str(plan.cold_rate),
        "TWEEPY_BENCH_COLD_WINDOWS": str(plan.cold_windows),
        "TWEEPY_BENCH_WINDOW": str(plan.window_s),
        "TWEEPY_BENCH_HERD": str(plan.herd),
        "TWEEPY_BENCH_HERDS": str(plan.herds),
        "TWEEPY_BENCH_RECOVERY_WINDOW": str(plan.recovery_window_s),
        "TWEEPY_BENCH_RECOVERY_LIMIT": str(plan.recovery_limit_s),
        "TWEEPY_BENCH_RAMP_LIMIT": str(plan.ramp_limit_s),
        "TWEEPY_BENCH_OUT": str(out),
        "TWEEPY_BENCH_SERVER_PIDS": " ".join(map(str, server_pids)),
        "TWEEPY_BAR_P95_MS": str(plan.bar.max_p95_ms),
        "TWEEPY_BAR_FAILURES": str(plan.bar.max_failures),
        "TWEEPY_BAR_MIN_REQUESTS": str(plan.bar.min_requests),
    }


# Each cold start a stage may get: the key its result keeps it under, and its raw files' name.
COLD_FILES = {"cold_start": "cold", "cold_start_at_target": "cold-target"}


def cold_starts(plan: Plan, stage: stages.Stage, capacity_users: int, bound: Mapping) -> dict[str, int]:
    """The cold starts a stage gets, by the key its result keeps each under, with their users: one at its
    capacity; and, for the default stage whose capacity lies past it, one at the share of its bcrypt bound
    (its own library's hashes a second x 247/3, a user asking about once a second) the targets are written
    for. Only the default stage's: another cold start and its herds add some eleven minutes to a stage."""
    if not plan.cold_windows:
        return {}
    starts = {"cold_start": capacity_users}
    if stage.number == stages.DEFAULT_STAGE and not stage.part and plan.target_share:
        probe = probe_of(bound, stage.app_setting("BCRYPT_LIBRARY"))
        users = round(plan.target_share * protocol_qps_bound(probe["hashes_per_s"]))
        if users < capacity_users:
            starts["cold_start_at_target"] = users
    return starts


def cold_time_limit(plan: Plan) -> float:
    """How long locust may run the cold start and the herds before they are cut short."""
    herds = plan.herds * (plan.window_s + plan.recovery_limit_s) + (plan.herds - 1) * plan.window_s
    return plan.ramp_limit_s + plan.cold_windows * plan.window_s + herds + 120


def command_of(plan: Mapping, every_stage: list[int]) -> str:
    """The command that makes a run with this plan (a plan as results.json keeps it), its settings spelt out
    where they differ from the defaults, so a published table says how to make it again."""
    defaults = asdict(quick_plan(every_stage) if plan.get("quick") else Plan(stages=every_stage))
    changed = [
        f"{name}={plan[attribute]:g}" if isinstance(plan[attribute], float) else f"{name}={plan[attribute]}"
        for name, attribute in ATTRIBUTES.items()
        if attribute in plan and plan[attribute] != defaults[attribute]
    ]
    if tuple(plan.get("steps", defaults["steps"])) != defaults["steps"]:
        changed.append(f'TWEEPY_BENCH_STEPS="{" ".join(map(str, plan["steps"]))}"')
    if plan.get("bcrypt_cost", 12) != defaults["bcrypt_cost"]:
        changed.append(f"TWEEPY_BCRYPT_LOG_ROUNDS={plan['bcrypt_cost']}")
    if plan.get("composed"):
        return " ".join([".venv/bin/python -m tools.bench --compose", *plan["composed"]])
    chosen = list(plan.get("stages") or every_stage)
    if plan.get("variant") or plan.get("out"):
        # make has no target for a folder of one's own: such a run is never published as the ladder's figures.
        sets = [f"--set {name}={value}" for name, value in (plan.get("variant") or {}).items()]
        command = [".venv/bin/python -m tools.bench", f'--stages "{" ".join(map(str, chosen))}"', *sets]
        command += ["--quick"] if plan.get("quick") else []
        command += [f"--keep-from {plan['kept_from']}"] if plan.get("kept_from") else []
        return " ".join([*changed, *command, f"--out {plan.get('out') or 'FOLDER'}"])
    arguments = ["make bench"]
    if plan.get("split"):
        arguments.append(f"SPLIT={plan['split']}")  # the stages follow from it
    elif chosen != every_stage:
        arguments.append(f'STAGES="{" ".join(map(str, chosen))}"')
    if plan.get("quick"):
        arguments.append("QUICK=1")
    if plan.get("kept_from"):
        arguments.append(f"KEEP_FROM={plan['kept_from']}")
    return " ".join([*changed, *arguments])
