"""The report as Markdown for chat and webhooks: headline, each section's lines and tables (plots are named,
not drawn). Every string from the store is cleaned of control characters and has Markdown and HTML markup
escaped, so a job named `[click](http://x)` or `<img src=x>` stays text."""

from __future__ import annotations

import re

from aiops.report.model import Report, Table
from aiops.report.text import clean, utc

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that make markup inline
# (emphasis, code, links, images, HTML, tables, strikethrough, entities). URLs are broken up so that GFM's
# autolinks do not turn `http://x` or `www.x` into links; a leading list or heading marker is escaped.
_MARKUP = re.compile(r"([\\`*_{}\[\]()#!|<>~&])")
_AUTOLINK = re.compile(r"(?i)(://|www\.)")
_LEADING = re.compile(r"^(\s*)(\d*)([-+=.)])(?=[\s=-]|$)")


def md_escape(value: object) -> str:
    text = _MARKUP.sub(r"\\\1", clean(value))
    text = _AUTOLINK.sub(lambda m: "".join("\\" + c if not c.isalnum() else c for c in m.group(1)), text)
    return _LEADING.sub(lambda m: m.group(1) + m.group(2) + "\\" + m.group(3), text)


def _table(table: Table) -> list[str]:
    lines = [f"**{md_escape(table.caption)}**", ""]
    lines.append("| " + " | ".join(md_escape(h) for h in table.headers) + " |")
    lines.append("|" + "---|" * len(table.headers))
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in table.rows]
    return [*lines, ""]


def render_md(report: Report, *, link: str | None = None) -> str:
    lines = [f"# {md_escape(report.title)}", "", f"**{md_escape(report.headline)}**", ""]
    lines.append(f"Generated {md_escape(utc(report.generated_ts_s))}.")
    if link:
        lines.append(f"Full report: {md_escape(link)}")
    lines.append("")
    for section in report.sections:
        lines += [f"## {md_escape(section.title)}", ""]
        lines += [md_escape(line) + "  " for line in section.lines]
        if section.lines:
            lines.append("")
        if section.plots:
            lines += [
                "Plots (in the HTML report): " + ", ".join(md_escape(p.title) for p in section.plots),
                "",
            ]
        for table in section.tables:
            lines += _table(table)
    return "\n".join(lines).rstrip() + "\n"
