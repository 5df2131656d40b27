"""The charts of a bench run: the ladder with the best stage's curve, and one per stage."""

from __future__ import annotations

from pathlib import Path

from tools.bench.runs import TALK, bar_of, capacity_of_row, talk_qps
from tools.bench.split import part_of


def chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bar = bar_of(report)
    results = report["stages"]
    fig, (ladder, curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['stage']}\n{r['name']}" for r in results]
    # The capacity's median of its windows, the bar's whisker their spread: the same figure as every table.
    capacities = [capacity_of_row(r) for r in results]
    qps = [c["rps"]["median"] if c else 0 for c in capacities]
    spread = [
        [c["rps"]["median"] - c["rps"]["min"] if c else 0 for c in capacities],
        [c["rps"]["max"] - c["rps"]["median"] if c else 0 for c in capacities],
    ]
    p95 = [c["p95_ms"] if c else float("nan") for c in capacities]
    if report.get("composed"):  # parts from other hours or hosts: each stage against its own part's control
        per = [1 / part_of(report, r)["control"]["rps"]["median"] for r in results]
        qps = [value * scale for value, scale in zip(qps, per, strict=True)]
        spread = [[value * scale for value, scale in zip(side, per, strict=True)] for side in spread]
    ladder.bar(labels, qps, color="#1d7fc4", yerr=spread, capsize=3)
    ladder.tick_params(axis="x", labelsize=8)
    ladder.set_ylabel(
        f"QPS at the bar ÷ its part's stage {report['composed']['control']}"
        if report.get("composed")
        else "QPS meeting the bar (median of its windows)"
    )
    ladder.set_title("The ladder")
    for x, (value, r) in enumerate(zip(qps, results, strict=True)):
        mark = "" if r["search"]["state"] == "complete" else " (cut short)"
        shown = f"{value:.2f}" if report.get("composed") else f"{value:.0f}"
        ladder.annotate(f"{shown}{mark}", (x, value), ha="center", va="bottom", fontsize=9)
    slowest_p95 = [(c or {}).get("slowest_p95_ms") or float("nan") for c in capacities]
    latency = ladder.twinx()
    latency.plot(labels, p95, color="#c0392b", marker="o", label="all requests")
    latency.plot(labels, slowest_p95, color="#c0392b", marker="x", linestyle="--", label="slowest request type")
    latency.set_ylabel("p95 ms at that step", color="#c0392b")
    latency.legend(loc="upper left", fontsize=8)

    top = results[max(range(len(results)), key=lambda i: qps[i])]
    steps = [s for s in top["steps"] if "rps" in s] + ([top["overload"]] if top.get("overload") else [])
    curve.plot([s["users"] for s in steps], [s["rps"] for s in steps], color="#1d7fc4", marker="o")
    curve.set_xlabel("users")
    curve.set_ylabel("requests/s")
    curve.set_title(f"Stage {top['stage']} ({top['name']}): load against users")
    latency = curve.twinx()
    latency.plot([s["users"] for s in steps], [s["p95_ms"] for s in steps], color="#c0392b", marker="o")
    latency.axhline(bar.max_p95_ms, color="#c0392b", linestyle=":", linewidth=1)
    latency.set_ylabel(f"p95 ms (dotted: the bar, {bar.max_p95_ms:.0f} ms)", color="#c0392b")
    parts = (report.get("composed") or {}).get("parts", [])
    runs = [f"part {p['part']}: {p['machine']['host']}, {p['date']}" for p in parts]
    fig.suptitle(
        f"tweepy on {report['machine']['cores']} cores, bcrypt cost {report['bcrypt']['cost']}, "
        f"{'; '.join(runs) or report['date']}; bar: {bar.text()}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_name(result: dict) -> str:
    return f"stage-{result['stage']}" + (f"-{result['part']}" if result.get("part") else "") + ".png"


def stage_chart(report: dict, result: dict, path: Path) -> None:
    """One stage's steps: QPS and p95 (all requests, and the slowest type) against users, the talk's figure marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bar = bar_of(report)
    steps = [s for s in result["steps"] if "rps" in s]
    overload = result.get("overload") if (result.get("overload") or {}).get("rps") is not None else None
    fig, qps = plt.subplots(figsize=(6.4, 4))
    users = [s["users"] for s in steps]
    qps.plot(users, [s["rps"] for s in steps], color="#1d7fc4", marker="o", label="requests/s")
    met = [s for s in steps if s.get("met_bar")]
    qps.scatter([s["users"] for s in met], [s["rps"] for s in met], s=90, facecolors="none", edgecolors="#1d7fc4",
                label="met the bar")  # fmt: skip
    if overload:
        qps.scatter([overload["users"]], [overload["goodput_rps"]], color="#7f8c8d", marker="s",
                    label="successful requests past capacity")  # fmt: skip
    talk = talk_qps(result)
    if talk:
        qps.axhline(talk, color="#27ae60", linestyle="--", linewidth=1, label=f"the talk: {TALK[result['stage']]}")
    qps.set_xlabel("locust users")
    qps.set_ylabel("requests/s")
    qps.legend(loc="upper left", fontsize=7)
    latency = qps.twinx()
    every = steps + ([overload] if overload else [])
    latency.plot([s["users"] for s in every], [s["p95_ms"] for s in every], color="#c0392b", marker=".",
                 linewidth=1, label="p95, all requests")  # fmt: skip
    slowest = [(s["users"], s.get("slowest_p95_ms")) for s in every if s.get("slowest_p95_ms") is not None]
    latency.plot([u for u, _ in slowest], [v for _, v in slowest], color="#c0392b", marker="x", linestyle="--",
                 linewidth=1, label="p95, slowest request type")  # fmt: skip
    latency.axhline(bar.max_p95_ms, color="#c0392b", linestyle=":", linewidth=1)
    latency.set_yscale("log")
    latency.set_ylabel(f"p95 ms, log scale (dotted: the bar, {bar.max_p95_ms:.0f} ms)", color="#c0392b")
    latency.legend(loc="lower right", fontsize=7)
    qps.set_title(
        f"Stage {result['stage']} {result['name']}: {report['machine']['cores']} cores, bcrypt cost "
        f"{report['bcrypt']['cost']}, run of {result['run']['date']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
