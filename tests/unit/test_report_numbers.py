"""How the HTML report writes a number for people (tasks/report/html.py): 3 significant digits, no exponent in the
everyday range, thousands separated, a typographic minus; a NULL as a dash."""

from __future__ import annotations

import pytest

from tasks.report.html import _fmt, _sig


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (0.3399, "0.340"),  # goodput_req_s as the issue saw it
        (18.3288, "18.3"),  # mbu_pct
        (-1784.4857, "\u22121,780"),  # ttft_ms_mean_ci_low
        (34.0, "34.0"),
        (1234567.0, "1.23e+06"),
        (0.000123, "1.23e\u221204"),
        (0.0, "0"),
    ],
)
def test_three_significant_digits(raw: float, shown: str) -> None:
    assert _sig(raw) == shown


def test_cells() -> None:
    assert _fmt(None) == _fmt(float("nan")) == "\u2014"
    assert _fmt(100) == "100" and _fmt(12345) == "12,345"  # counts stay whole
    assert _fmt("a<b") == "a&lt;b"
