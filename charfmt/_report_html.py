"""The report as one self-contained HTML page: tables written here, charts drawn by the page's own script.

Nothing is loaded from elsewhere (no CDN, no font): the page opens from a file, offline.
The figures are embedded as JSON in a ``<script type="application/json">`` element
(``<`` escaped, so no value can end the element) and the script draws with
``createElementNS``/``textContent`` only: text from the log never becomes markup.
"""

from __future__ import annotations

import html
import json
from typing import Any, Final

from charfmt.report import bytes_text

_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.note { text-align: left; font-family: ui-monospace, monospace; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; }
.legend span { display: inline-block; margin-right: 1em; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""

_SCRIPT: Final = r"""
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLOURS = { valid: "#2e7d32", repaired: "#f9a825", empty: "#c62828" };
  var report = JSON.parse(document.getElementById("report-data").textContent);
  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function svg(kind, width, height, label) {
    var s = el("svg", { "class": "chart " + kind, width: width, height: height, viewBox: "0 0 " + width + " " + height,
                        role: "img", "aria-label": label });
    return s;
  }
  // One horizontal bar: strict-valid, repaired and empty shares of the group.
  function outcomeBar(group) {
    var width = 420, s = svg("outcome", width, 28, "outcome of " + group.count + " replies"), x = 0;
    ["valid", "repaired", "empty"].forEach(function (k) {
      var w = width * (group[k + "_pct"] || 0) / 100;
      var r = el("rect", { x: x, y: 4, width: w.toFixed(2), height: 20, fill: COLOURS[k], "data-part": k,
                           "data-pct": group[k + "_pct"] });
      r.appendChild(el("title", {}, k + " " + (group[k + "_pct"] === null ? "-" : group[k + "_pct"] + "%")));
      s.appendChild(r);
      x += w;
    });
    return s;
  }
  // Bars of shares, one per item, longest first: top codes or the dialect mix.
  function barChart(kind, items, name) {
    var rowH = 20, labelW = 110, width = 420, s = svg(kind, labelW + width + 60, rowH * items.length + 4, kind);
    items.forEach(function (item, i) {
      var y = i * rowH + 2, w = width * item.pct / 100;
      s.appendChild(el("text", { x: 0, y: y + 14, "font-size": 12 }, item[name]));
      var r = el("rect", { x: labelW, y: y + 2, width: w.toFixed(2), height: rowH - 6, fill: "#1565c0",
                           "data-item": item[name], "data-pct": item.pct });
      r.appendChild(el("title", {}, item[name] + " " + item.pct + "% (" + item.replies + " replies)"));
      s.appendChild(r);
      s.appendChild(el("text", { x: labelW + w + 4, y: y + 14, "font-size": 12 }, item.pct.toFixed(1) + "%"));
    });
    return s;
  }
  function figure(chart, caption) {
    var f = document.createElement("figure");
    f.appendChild(chart);
    var c = document.createElement("figcaption");
    c.textContent = caption;
    f.appendChild(c);
    return f;
  }
  var groups = [report.total].concat(report.by.length ? report.groups : []);
  groups.forEach(function (group, i) {
    var box = document.getElementById("charts-" + i);
    box.appendChild(figure(outcomeBar(group), "strict-valid / repaired / empty"));
    if (group.codes.length) { box.appendChild(figure(barChart("codes", group.codes, "code"), "top diagnostic codes")); }
    if (group.dialects.length) {
      box.appendChild(figure(barChart("dialects", group.dialects, "dialect"), "dialect mix"));
    }
  });
  document.body.setAttribute("data-rendered", String(groups.length));
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def render_html(report: dict[str, Any]) -> str:
    """The whole page for ``report`` (:meth:`charfmt.report.Summary.to_dict`)."""
    groups = [("all", report["total"])]
    if report["by"]:
        groups += [(g["label"], g) for g in report["groups"]]
    data = json.dumps(report, ensure_ascii=False, sort_keys=True, allow_nan=False).replace("<", "\\u003c")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>charfmt report: {_e(report['input'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>charfmt report: {_e(report['input'])}</h1>",
        f"<p>Field <code>{_e(report['field'])}</code>, {report['lines']:,} lines, "
        f"{report['total']['count']:,} replies, {report['bad_lines']['count']:,} bad lines.</p>",
        '<div class="legend">'
        + "".join(
            f'<span><i style="background:{c}"></i>{k}</span>'
            for k, c in (("strict-valid", "#2e7d32"), ("repaired", "#f9a825"), ("empty", "#c62828"))
        )
        + "</div>",
        "<p>Strict-valid (strict parsing accepts the reply; <code>{&quot;chats&quot;: []}</code> too), repaired"
        " (lenient parsing recovered a chat) and empty (nothing recovered) split the replies: together 100 %."
        " Keep: the replies in <code>keep.jsonl</code>, every valid one and each repaired one that lost nothing.</p>",
        '<table id="groups"><tr><th>group</th><th>replies</th><th>strict-valid</th><th>repaired</th><th>empty</th>'
        "<th>keep</th><th>p50 size</th><th>p99 size</th></tr>",
    ]
    for name, g in groups:
        parts.append(
            f"<tr><td>{_e(name)}</td><td>{g['count']:,}</td><td>{_pct(g['valid_pct'])}</td>"
            f"<td>{_pct(g['repaired_pct'])}</td><td>{_pct(g['empty_pct'])}</td><td>{_pct(g['keep_pct'])}</td>"
            f"<td>{bytes_text(g['size_p50'])}</td><td>{bytes_text(g['size_p99'])}</td></tr>"
        )
    parts.append("</table>")
    for i, (name, g) in enumerate(groups):
        parts.append(f"<h2>{_e(name)}: {g['count']:,} replies</h2>")
        parts.append(f'<div class="charts" id="charts-{i}"></div>')
        if g["codes"]:
            parts.append("<table><tr><th>code</th><th>replies</th><th>share</th><th>first example</th></tr>")
            for c in g["codes"]:
                parts.append(
                    f"<tr><td>{_e(c['code'])}</td><td>{c['replies']:,}</td><td>{c['pct']:.1f}%</td>"
                    f'<td class="note">line {c["example"]["line"]}: {_e(c["example"]["message"])}</td></tr>'
                )
            parts.append("</table>")
    bad = report["bad_lines"]
    parts.append(f"<h2>Bad lines: {bad['count']:,}</h2>")
    if bad["first"]:
        parts.append('<table id="bad"><tr><th>line</th><th>reason</th></tr>')
        parts += [f'<tr><td>{b["line"]}</td><td class="note">{_e(b["reason"])}</td></tr>' for b in bad["first"]]
        parts.append("</table>")
    parts.append(f'<script type="application/json" id="report-data">{data}</script>')
    parts.append(f"<script>{_SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
