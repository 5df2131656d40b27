"""What a bench run writes: ``RESULTS.md`` and its charts in its own folder, and, for a run
that may publish, the READMEs and ``results/LATEST.md`` (``publishing``)."""

from __future__ import annotations

from pathlib import Path

from tools.bench.charts import chart, chart_name, stage_chart
from tools.bench.headline import PUBLISHED_WINDOWS
from tools.bench.publishing import measured_every_stage, publish
from tools.bench.runs import RESULTS, ROOT, normalize
from tools.bench.tables import markdown


def publishes(report: dict, folder: Path, root: Path = ROOT) -> bool:
    """Whether a run gives the ladder's figures: one that measured every stage itself, into a folder of
    its own under results/, or one composed of the parts of a split run; never a smoke run, a variant
    (``--out``), a part alone (``--split``), a run whose capacities rest on fewer than
    ``PUBLISHED_WINDOWS`` windows, nor a partial run (``--stages``, or stages kept from an earlier run)."""
    plan = report["plan"]
    in_results = folder.resolve().is_relative_to((root / RESULTS.relative_to(ROOT)).resolve())
    too_few = plan.get("capacity_windows", PUBLISHED_WINDOWS) < PUBLISHED_WINDOWS
    refused = plan.get("quick") or plan.get("out") or plan.get("split") or too_few
    return in_results and not refused and measured_every_stage(report)


def write_reports(report: dict, folder: Path, root: Path = ROOT) -> bool:
    """Write the run's own reports, and publish it if it may; returns whether it did."""
    report = normalize(report)
    (folder / "RESULTS.md").write_text(markdown(report))
    chart(report, folder / "chart.png")
    if not report.get("composed"):  # a composed ladder's rows are charted in their parts' folders
        for result in report["stages"]:
            if any("rps" in step for step in result["steps"]):
                stage_chart(report, result, folder / chart_name(result))
    if not publishes(report, folder, root):
        return False
    publish(report, folder, root)
    return True
