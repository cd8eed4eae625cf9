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


def test_long_lengths_get_a_log_axis() -> None:
    """Issue 28: a long-prompt source (20k–90k tokens, under 20× apart) was drawn on a linear
    axis."""
    from distprompt.write.render import LOG_LENGTHS_FROM, log_lengths

    assert log_lengths([20_000, 45_000, 90_000])
    assert log_lengths([LOG_LENGTHS_FROM // 2, LOG_LENGTHS_FROM])
    assert log_lengths([3, 100])  # more than 20x apart, as before
    assert not log_lengths([120, 900]) and not log_lengths([]) and not log_lengths([0, 10_000])


def test_every_cluster_has_its_own_colour() -> None:
    """Issue 28: colours came from tab20 by cluster % 20, so clusters 0 and 20 looked alike."""
    import matplotlib

    matplotlib.use("Agg")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from distprompt.write.render import cluster_colors

    @settings(max_examples=40, deadline=None)
    @given(st.integers(min_value=0, max_value=600))
    def distinct(n: int) -> None:
        colors = cluster_colors(n)
        assert len(colors) == n and len({tuple(c) for c in colors}) == n

    distinct()


def test_bench_plot_labels_concurrency_as_numbers() -> None:
    """Issue 28: summary.png labelled concurrency 2⁰, 2¹, 2² instead of 1, 2, 4."""
    import matplotlib

    matplotlib.use("Agg")
    from distprompt.benchmark.report import concurrency_axis
    from distprompt.write.render import _figure

    fig = _figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2, 4, 16], [10, 20, 35, 50])
    concurrency_axis(ax, [1, 2, 4, 16])
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels == ["1", "2", "4", "16"]
    assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
