"""What a bench run writes: ``RESULTS.md`` and its charts in its own folder, and, for a
run that may publish, the READMEs and ``results/LATEST.md`` (``publishing``)."""

from __future__ import annotations

from pathlib import Path

from tools.bench.charts import chart, chart_name, stage_chart
from tools.bench.publishing import publish
from tools.bench.runs import normalize
from tools.bench.tables import markdown


def write_reports(report: dict, folder: Path, publish_it: bool) -> None:
    report = normalize(report)
    (folder / "RESULTS.md").write_text(markdown(report))
    chart(report, folder / "chart.png")
    for result in report["stages"]:
        if any("rps" in step for step in result["steps"]):
            stage_chart(report, result, folder / chart_name(result))
    if publish_it:
        publish(report, folder)
