"""The table as a picture: one panel per row and metric, one bar per system (its median).

matplotlib is an optional dependency (the `bench` extra: `pip install -e '.[bench]'`); without
it the harness says so on stderr and writes the table only.

`python -m bench.chart` draws the chart again from the table in docs/benchmarks/index.md (a run cut
short leaves its rows there, and no chart).
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from bench.rows import CONSUMER, SPARK_KAFKA, SPARK_SYSTEMS, RowResult
from bench.targets import KAFKA, MINIBROKER, MOCK

COLUMNS = 4
PANEL_INCHES = (4.0, 2.9)
# A colour per system, the same in every panel.
COLOURS = {
    MINIBROKER: "#1f77b4",
    MOCK: "#9e9e9e",
    KAFKA: "#d62728",
    SPARK_KAFKA: "#ff7f0e",
    CONSUMER: "#2ca02c",
}
LABELS = {
    MINIBROKER: "minibroker",
    MOCK: "mock",
    KAFKA: "Apache Kafka",
    SPARK_KAFKA: "Spark's connector",
    CONSUMER: "one consumer",
}


Panel = tuple[str, list[tuple[str, float | None, str]]]
NUMBER = re.compile(r"-?[\d,]*\.?\d+")
COLUMNS_OF = {"minibroker": MINIBROKER, "mock": MOCK, "Apache Kafka": KAFKA}
# The Spark rows' table (bench.report.spark_table).
SPARK_COLUMNS_OF = {
    "minibroker's source": MINIBROKER,
    "Spark's connector": SPARK_KAFKA,
    "one consumer": CONSUMER,
}


def panels_from_markdown(text: str) -> list[Panel]:
    """The panels of the table (headings "row", "workload", "metric", one per system) in a
    benchmarks page's text; a cell without a number ("skipped", "n/a") is a missing bar."""
    out: list[Panel] = []
    headings: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            headings = None
            continue
        columns = [column.strip() for column in line.strip().strip("|").split("|")]
        if columns[:2] == ["row", "workload"]:
            headings = columns
        elif headings is not None and not columns[0].startswith("---"):
            named = dict(zip(headings, columns, strict=False))
            bars = []
            columns_of = SPARK_COLUMNS_OF if "minibroker's source" in headings else COLUMNS_OF
            for heading, system in columns_of.items():
                cell = named.get(heading, "n/a")
                found = NUMBER.match(cell)
                value = float(found.group().replace(",", "")) if found else None
                bars.append((system, value, cell))
            out.append((f"{named['row']}: {named['metric']}", bars))
    return out


def panels(results: list[RowResult]) -> list[Panel]:
    """(title, [(system, median or None, why there is no bar)]) for every row and metric."""
    out = []
    for result in results:
        for line in result.row.lines:
            bars = []
            for system in SPARK_SYSTEMS if result.row.spark else (MINIBROKER, MOCK, KAFKA):
                value = result.median(system, line.key)
                if system in result.failures:
                    why = "failed"
                elif system in result.not_served:
                    why = "not served"
                elif system in result.skipped:
                    why = "skipped"
                else:
                    why = "n/a"
                bars.append((system, value, why))
            out.append((f"{result.row.name}: {line.metric}", bars))
    return out


def write_chart(results: list[RowResult], path: Path, command: str) -> bool:
    """Write the PNG; False (and a message on stderr) when matplotlib is not installed."""
    return draw(panels(results), path, command)


def draw(drawn: list[Panel], path: Path, title: str) -> bool:
    """Draw `drawn` into the PNG at `path`; False when matplotlib is missing or no panel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"matplotlib is not installed (pip install -e '.[bench]'): {path.name} not written",
            file=sys.stderr,
        )
        return False
    if not drawn:
        return False
    rows = -(-len(drawn) // COLUMNS)
    figure, axes = plt.subplots(
        rows,
        COLUMNS,
        figsize=(PANEL_INCHES[0] * COLUMNS, PANEL_INCHES[1] * rows),
        squeeze=False,
    )
    for axis, (heading, bars) in zip(axes.flat, drawn, strict=False):
        names = [LABELS[system] for system, _, _ in bars]
        heights = [value or 0.0 for _, value, _ in bars]
        axis.bar(names, heights, color=[COLOURS[system] for system, _, _ in bars])
        top = max(heights) or 1.0
        for index, (_, value, why) in enumerate(bars):
            label = why if value is None else f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"
            axis.text(index, (value or 0.0) + top * 0.02, label, ha="center", fontsize=8)
        axis.set_ylim(0, top * 1.18)
        axis.set_title("\n".join(textwrap.wrap(heading, 48)), fontsize=8)
        axis.tick_params(labelsize=8)
    for axis in list(axes.flat)[len(drawn) :]:
        axis.set_visible(False)
    figure.suptitle(f"{title} (medians; see the benchmarks page for what each panel measures)")
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(path, dpi=80)
    plt.close(figure)
    print(f"wrote {path}", file=sys.stderr)
    return True


if __name__ == "__main__":
    from bench.report import BEGIN_MARKER, BENCHMARKS, CHART, END_MARKER

    written = BENCHMARKS.read_text()
    block = written[written.find(BEGIN_MARKER) : written.find(END_MARKER)]
    command = re.search(r"Command: `([^`]*)`", block)
    date = re.search(r"^- date: (.*)$", block, re.M)
    title = f"{command.group(1) if command else 'python -m bench'}, {date.group(1) if date else ''}"
    sys.exit(0 if draw(panels_from_markdown(block), CHART, title) else 1)
