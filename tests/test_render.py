"""Tests for :mod:`distprompt.write.render`: the report's Markdown, HTML and terminal tables."""

from __future__ import annotations

from distprompt.write.render import PLOT_NAMES, format_table, html_page, markdown

from factories import two_source_report


def test_format_table_aligns_first_column_left_the_others_right() -> None:
    lines = format_table([("source", "rows"), ("a", "7"), ("longer", "1234")])
    assert lines == ["source  rows", "a          7", "longer  1234"]


def test_markdown_has_the_summary_one_row_per_source_and_every_plot() -> None:
    rep = two_source_report()
    md = markdown(rep)
    lines = md.splitlines()
    assert lines[0] == "# Representativeness report" and lines[2] == rep.summary
    rows = [line for line in lines if line.startswith("| ") and "---" not in line]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| **overall**", "| a", "| b"]
    assert all(f"({name})" in md for name in PLOT_NAMES)  # the report has a projection
    assert "Run: " in md and "method=test" in md


def test_html_page_escapes_what_the_data_holds_and_inlines_the_plots() -> None:
    rep = two_source_report()
    rep.examples["a"][0]["prompt"] = "<script>alert(1)</script> & more"
    page = html_page(rep, {PLOT_NAMES[0]: b"\x89PNG fake"})
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert page.count("data:image/png;base64,") == 1
    assert page.count("<details>") == 2  # one per source
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body></html>\n")


def test_a_plot_process_that_gets_no_report_draws_nothing() -> None:
    # Started ahead of the report (to import matplotlib meanwhile), it exits quietly when its
    # parent closes stdin without handing one over (an error, or Ctrl-C, in between).
    import subprocess
    import sys

    code = "from distprompt.write.render import serve_plots; serve_plots()"
    done = subprocess.run(
        [sys.executable, "-c", code], input=b"", capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
