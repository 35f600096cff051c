"""Health reports of a period: aggregates computed in DuckDB (`queries*`), plots drawn with matplotlib (`plots`),
rendered as self-contained HTML, Markdown and PDF (`render_html`, `render_md`, `pdf`). `build.build_report`
is the one entry point; `aiops report` and the service's schedule call it."""

from aiops.report.build import build_report
from aiops.report.model import Plot, Report, Section, Table
from aiops.report.period import Period, parse_period

__all__ = ["Period", "Plot", "Report", "Section", "Table", "build_report", "parse_period"]
