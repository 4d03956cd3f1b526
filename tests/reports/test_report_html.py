"""charfmt report --format html: one self-contained page whose charts render in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from charfmt.cli import main

pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (extra charfmt[arrow])")

HOSTILE = '</script><img src=x onerror="document.title=1"><b>bold</b>'


def _log(path: Path) -> None:
    rows = [
        {"text": '{"chats": [{"type": "E", "order": 1, "body": "Rain."}]}', "model": "a"},
        {"text": "Sure! [joy] hi", "model": "a"},
        {"text": "<think>x</think>{'chats': [{'type': 'C', 'order': 1, 'body': '<emo>joy</emo>'},]}", "model": HOSTILE},
        {"text": "", "model": HOSTILE},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "oops\n", encoding="utf-8")


def _page(tmp_path: Path, capsys: Any) -> tuple[str, dict[str, Any]]:
    log = tmp_path / "log.jsonl"
    _log(log)
    assert main(["report", str(log), "--by", "model", "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert main(["report", str(log), "--by", "model", "--format", "json"]) == 0
    return page, json.loads(capsys.readouterr().out)


def test_page_is_self_contained_and_escapes_the_log(tmp_path: Path, capsys: Any) -> None:
    page, data = _page(tmp_path, capsys)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing loaded from elsewhere
    assert "<img" not in page and "<b>bold" not in page
    assert page.count("</script>") == 2  # the data element and the script; the hostile value ended neither
    embedded = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert embedded is not None and json.loads(embedded.group(1)) == data


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.browser
def test_charts_render_in_headless_chromium(tmp_path: Path, capsys: Any) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    page, data = _page(tmp_path, capsys)
    html = tmp_path / "report.html"
    html.write_text(page, encoding="utf-8")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    done = subprocess.run(
        [browser, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    groups = [data["total"], *data["groups"]]
    assert f'data-rendered="{len(groups)}"' in dom, "the page's script did not finish"
    assert dom.count('<svg class="chart outcome"') == len(groups)
    assert dom.count('<svg class="chart codes"') == sum(bool(g["codes"]) for g in groups)
    assert dom.count('<svg class="chart dialects"') == sum(bool(g["dialects"]) for g in groups)
    # Each outcome bar holds its group's three shares, in order.
    bars = re.findall(r'<rect [^>]*data-part="(\w+)" data-pct="([\d.]+)"', dom)
    assert bars == [(part, f"{g[part + '_pct']:g}") for g in groups for part in ("valid", "repaired", "empty")]
    codes = re.findall(r'<rect [^>]*data-item="(CF\d+)"', dom)
    assert codes == [c["code"] for g in groups for c in g["codes"]]
    assert "<img" not in dom and "<b>bold</b>" not in dom  # the hostile group name stayed text
    assert "</script>&lt;img src=x" in dom or "&lt;/script&gt;&lt;img" in dom


_MARK = "document.body.setAttribute('data-pwned', '{}')"
INJECTIONS = [
    "<script>" + _MARK.format(1) + "</script>",
    '"><img src=x onerror="' + _MARK.format(2) + '">',
    "'><svg onload='" + _MARK.format(3) + "'>",
    "</script><script>" + _MARK.format(4) + "</script>",
    "'; " + _MARK.format(5) + "; '",
    '"; ' + _MARK.format(6) + '; "',
    "<!--<script>" + _MARK.format(7) + "</script>-->",
]
"""Strings that run a script wherever a value ends up as markup or code instead of text."""


@pytest.mark.browser
def test_no_injected_script_runs_and_the_charts_still_draw(tmp_path: Path, capsys: Any) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    reply = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>hi</msg>"}]}'
    rows = []
    for i, bad in enumerate(INJECTIONS):
        rows.append({"text": reply, "model": bad})  # a group name
        rows.append({"text": f"{bad} [joy] {bad}", "model": bad})  # a reply whose diagnostics quote it
        rows.append({bad: "no text key", "model": "x"})  # a bad line whose reason lists its keys
        rows.append({"text": i, "model": {bad: [bad]}})  # a group value that is an object
    log = tmp_path / f"""log <img src=x onerror="{_MARK.format(8)}"> '.jsonl"""
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["report", str(log), "--by", "model", "--format", "html", "--no-progress"]) == 0
    page = capsys.readouterr().out
    assert main(["report", str(log), "--by", "model", "--format", "json", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    html = tmp_path / "report.html"
    html.write_text(page, encoding="utf-8")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    done = subprocess.run(
        [browser, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "data-pwned" not in body.group(), body.group()  # no injected script ran
    groups = [data["total"], *data["groups"]]
    assert len(groups) > len(INJECTIONS)
    assert f'data-rendered="{len(groups)}"' in body.group(), "the page's own script did not finish"
    assert dom.count('<svg class="chart outcome"') == len(groups)
    assert dom.count('<svg class="chart codes"') == sum(bool(g["codes"]) for g in groups)
    assert not re.search(r"<(img|svg|script)[^>]*(onerror|onload)=", dom)  # every hostile value stayed text
