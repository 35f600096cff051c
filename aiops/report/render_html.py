"""The report as one self-contained HTML page: inline CSS and inline SVG, no URL anywhere (no font, script or
image fetched), a Content-Security-Policy that forbids any fetch besides, light and dark colour schemes (the
plots sit on a light card in both). Jinja2 autoescapes every string; only the SVG drawn by `plots` is marked
safe."""

from __future__ import annotations

from jinja2 import Environment
from markupsafe import Markup

from aiops.report.model import Report
from aiops.report.text import clean, utc

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
:root { color-scheme: light dark; --bg: #fafafa; --fg: #1d1d1f; --muted: #555; --line: #d0d0d0; --accent: #0072B2; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16181c; --fg: #e8e8ea; --muted: #a8a8ad; --line: #3a3d44; --accent: #56B4E9; }
}
body { background: var(--bg); color: var(--fg); font: 15px/1.45 system-ui, sans-serif; margin: 0 auto;
  max-width: 70rem; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { border-bottom: 2px solid var(--accent); padding-bottom: .2rem; }
.meta { color: var(--muted); } .headline { font-size: 1.15rem; font-weight: 600; border-left: 4px solid var(--accent);
  padding: .4rem .8rem; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .85rem; max-width: 100%; }
caption { text-align: left; font-weight: 600; padding: .2rem 0; }
th, td { border: 1px solid var(--line); padding: .2rem .5rem; text-align: left; vertical-align: top; }
p, caption, th, td, figcaption, h1, h2 { overflow-wrap: break-word; }
pre, code { white-space: pre-wrap; overflow-wrap: break-word; }
figure { background: #ffffff; border-radius: 6px; padding: .5rem; margin: .6rem 0; display: inline-block;
  max-width: 100%; box-sizing: border-box; box-shadow: 0 0 0 1px var(--line); }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: #333333; font-size: .8rem; }
@page { size: A4; margin: 12mm 10mm; }
@media print {
  body { background: #fff; color: #000; max-width: none; padding: 0; font-size: 12px; }
  section { break-inside: auto; } figure { break-inside: avoid; }
  table { width: 100%; table-layout: fixed; font-size: .75rem; } th, td { padding: .15rem .3rem; }
  p, caption, th, td, figcaption, h1, h2, pre, code { overflow-wrap: anywhere; }
  tr { break-inside: avoid; }
}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ report.title }}</title>
<style>{{ css }}</style>
</head>
<body>
<header>
<h1>{{ report.title }}</h1>
<p class="meta">Generated {{ generated }}.</p>
<p class="headline" id="headline">{{ report.headline }}</p>
</header>
{% for section in report.sections %}
<section id="section-{{ section.key }}">
<h2>{{ section.title }}</h2>
{% for line in section.lines %}<p>{{ line }}</p>
{% endfor %}
{% for plot in section.plots %}<figure id="figure-{{ plot.key }}">{{ svg(plot) }}<figcaption>{{ plot.title }}</figcaption></figure>
{% endfor %}
{% for table in section.tables %}<table>
<caption>{{ table.caption }}</caption>
<thead><tr>{% for h in table.headers %}<th scope="col">{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in table.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table>
{% endfor %}
</section>
{% endfor %}
</body>
</html>
"""

_ENV = Environment(autoescape=True, keep_trailing_newline=True)


def render_html(report: Report) -> str:
    template = _ENV.from_string(_TEMPLATE)
    return template.render(
        report=report,
        csp=CSP,
        css=Markup(_CSS),
        generated=clean(utc(report.generated_ts_s)),
        svg=lambda plot: Markup(plot.svg),
    )
