"""Health reports of a period: aggregates computed in DuckDB (`queries*`), plots drawn with matplotlib (`plots`),
rendered as self-contained HTML, Markdown and PDF (`render_html`, `render_md`, `pdf`). `build.build_report`
builds one, `write.write_report` writes it; `aiops report` and the service's schedule (`schedule`) call them.

Nothing is imported here: `aiops` commands and the service import matplotlib only when they draw a report.
"""
