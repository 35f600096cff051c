"""A self-contained interactive flame graph SVG: one panel per view (calls, launch, blocked, idle), each in its
own colour family, stacked top to bottom. Inline JavaScript (no external file): click a frame to zoom its panel
to it, click the panel title to reset, the Search button (or Ctrl-F) highlights frames matching a regular
expression and shows the matched share per panel (a match inside another match is counted once). Every frame name is escaped for XML (text and attributes).
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

from aiops.profile.folded import VIEWS, clean_frame

WIDTH_PX = 1200
FRAME_PX = 16
CHAR_PX = 7
TITLES = {
    "calls": "all probed CUDA/NCCL calls",
    "launch": "stacks that fed the GPU (launches, copies, collectives)",
    "blocked": "time blocked in synchronising calls",
    "idle": "on-CPU stacks while the GPU was idle",
}
HUES = {"calls": 120, "launch": 210, "blocked": 0, "idle": 30}  # green, blue, red, orange


@dataclass
class Node:
    name: str
    weight: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def build_tree(weights: Counter[tuple[str, ...]]) -> Node:
    root = Node("all")
    for frames, weight in weights.items():
        root.weight += weight
        node = root
        for frame in frames:
            node = node.children.setdefault(frame, Node(frame))
            node.weight += weight
    return root


def _depth(node: Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def _colour(view: str, name: str) -> str:
    hue = HUES[view] + zlib.crc32(name.encode()) % 25
    light = 55 + zlib.crc32(name[::-1].encode()) % 20
    return f"hsl({hue},75%,{light}%)"


def _label(name: str, width_px: float) -> str:
    room = int((width_px - 6) // CHAR_PX)
    if room < 3:
        return ""
    return name if len(name) <= room else name[: room - 2] + ".."


def _panel(view: str, weights: Counter[tuple[str, ...]], top_px: int, parts: list[str]) -> int:
    root = build_tree(weights)
    unit = VIEWS[view]
    parts.append(
        f'<text class="title" x="10" y="{top_px + 14}" data-s="{view}">{escape(TITLES[view])} '
        f"({root.weight} {unit}; click to reset zoom)</text>"
    )
    depth = _depth(root)
    base_px = top_px + 24 + depth * FRAME_PX
    total = root.weight or 1

    def emit(node: Node, start: int, level: int) -> None:
        x0, x1 = start / total, (start + node.weight) / total
        width_px = (x1 - x0) * WIDTH_PX
        name = clean_frame(node.name)
        y = base_px - (level + 1) * FRAME_PX
        share = 100.0 * node.weight / total
        parts.append(
            f'<g class="f" data-s="{view}" data-d="{level}" data-a="{x0:.6f}" data-b="{x1:.6f}" '
            f"data-n={quoteattr(name)}><title>{escape(name)} ({node.weight} {unit}, {share:.2f}%)</title>"
            f'<rect x="{x0 * WIDTH_PX:.1f}" y="{y}" width="{width_px:.1f}" height="{FRAME_PX - 1}" '
            f'fill="{_colour(view, name)}" rx="2"/>'
            f'<text x="{x0 * WIDTH_PX + 3:.1f}" y="{y + FRAME_PX - 4}">{escape(_label(name, width_px))}</text></g>'
        )
        offset = start
        for child in sorted(node.children.values(), key=lambda child: child.name):
            emit(child, offset, level + 1)
            offset += child.weight

    if root.weight:
        emit(root, 0, 0)
    else:
        parts.append(f'<text x="10" y="{top_px + 40}">(no data for this view)</text>')
        return top_px + 60
    return base_px + 10


SCRIPT = """
var W = %d, CH = %d;
function frames(s) { return document.querySelectorAll('g.f[data-s="' + s + '"]'); }
function label(name, w) { var room = Math.floor((w - 6) / CH); if (room < 3) return '';
  return name.length <= room ? name : name.substring(0, room - 2) + '..'; }
function place(g, a, b) { var r = g.querySelector('rect'), t = g.querySelector('text');
  var w = (b - a) * W; r.setAttribute('x', (a * W).toFixed(1)); r.setAttribute('width', w.toFixed(1));
  t.setAttribute('x', (a * W + 3).toFixed(1)); t.textContent = label(g.getAttribute('data-n'), w); }
function zoom(g) { var s = g.getAttribute('data-s'), d = +g.getAttribute('data-d');
  var za = +g.getAttribute('data-a'), zb = +g.getAttribute('data-b'), span = zb - za;
  frames(s).forEach(function (f) { var a = +f.getAttribute('data-a'), b = +f.getAttribute('data-b');
    var inside = a >= za - 1e-9 && b <= zb + 1e-9, above = +f.getAttribute('data-d') < d && a <= za && b >= zb;
    if (above) { f.style.display = ''; f.style.opacity = 0.6; place(f, 0, 1); }
    else if (inside) { f.style.display = ''; f.style.opacity = 1; place(f, (a - za) / span, (b - za) / span); }
    else { f.style.display = 'none'; } }); }
function reset(s) { frames(s).forEach(function (f) { f.style.display = ''; f.style.opacity = 1;
  place(f, +f.getAttribute('data-a'), +f.getAttribute('data-b')); }); }
function searchFor(term) { var status = document.getElementById('matched'), re;
  try { re = new RegExp(term); } catch (e) { status.textContent = 'bad expression'; return; }
  var shares = {}, counted = {}; document.querySelectorAll('g.f').forEach(function (f) {
    var hit = term !== '' && re.test(f.getAttribute('data-n')), s = f.getAttribute('data-s');
    var a = +f.getAttribute('data-a'), b = +f.getAttribute('data-b');
    f.querySelector('rect').style.fill = hit ? 'rgb(230,0,230)' : '';
    /* frames come in pre-order: a match inside the last counted match of its panel is not counted again */
    if (hit && +f.getAttribute('data-d') > 0 && a >= (counted[s] || 0) - 1e-9) {
      shares[s] = (shares[s] || 0) + (b - a); counted[s] = b; } });
  status.textContent = term === '' ? '' : 'matched: ' + Object.keys(shares).map(function (s) {
    return s + ' ' + (100 * Math.min(1, shares[s])).toFixed(1) + '%%'; }).join(', '); }
function search() { var term = prompt('Search frames (regular expression)', ''); if (term !== null) searchFor(term); }
document.querySelectorAll('g.f').forEach(function (g) { g.addEventListener('click', function () { zoom(g); }); });
document.querySelectorAll('text.title').forEach(function (t) {
  t.addEventListener('click', function () { reset(t.getAttribute('data-s')); }); });
document.getElementById('search').addEventListener('click', search);
document.addEventListener('keydown', function (e) { if ((e.ctrlKey || e.metaKey) && e.key === 'f') {
  e.preventDefault(); search(); } });
"""


def flamegraph_svg(views: dict[str, Counter[tuple[str, ...]]], title: str) -> str:
    parts: list[str] = []
    top_px = 40
    for view, weights in views.items():
        top_px = _panel(view, weights, top_px, parts) + 10
    head = (
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH_PX}" height="{top_px}" '
        f'viewBox="0 0 {WIDTH_PX} {top_px}" font-family="monospace" font-size="11">\n'
        "<style>g.f { cursor: pointer; } g.f:hover rect { stroke: black; stroke-width: 0.5; } "
        "text.title { cursor: pointer; font-weight: bold; } #search { cursor: pointer; }</style>\n"
        f'<rect width="100%" height="100%" fill="#fafafa"/>\n<text x="10" y="20" font-size="14">'
        f"{escape(title)}</text>\n"
        f'<text id="search" x="{WIDTH_PX - 80}" y="20">[Search]</text>'
        f'<text id="matched" x="{WIDTH_PX - 420}" y="20"></text>\n'
    )
    script = SCRIPT % (WIDTH_PX, CHAR_PX)
    return head + "\n".join(parts) + f"\n<script><![CDATA[{script}]]></script>\n</svg>\n"
