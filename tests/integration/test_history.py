"""Nights as a history (issue 25): series keyed on what was measured, Otava's change points at load time,
v_change_points / v_regressions / v_quality_flips / v_recommendation_history, `tradeoff history` and the HTML
report, on synthetic nights written as the nightly writes them and loaded by the real loader."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from instruments.synthetic_history import Plan, nights
from tests.helpers import ROOT, render_in_chromium, widths_in_chromium
from warehouse.db import load_run, open_warehouse
from warehouse.history import OTAVA_VERSION

pytestmark = pytest.mark.slow  # minutes: run last, within the suite's budget (tests/conftest.py)

PLAN = Plan()  # seed 0: the benchmark (benchmarks/history_detection.py) measures the rate over 100 seeds
# the 40-night history of the module: the demo's four variants (q4_1's speculative twin too)
FORTY = replace(PLAN, speculative_twin=True)


@pytest.fixture(scope="module")
def forty_nights(tmp_path_factory) -> Path:
    """40 nights: q3_k_m's TPOT steps up 10 % at night 30, q2_k loses 12 items at night 20 (so the pick changes
    from q2_k to q3_k_m there), q4_1 and its speculative twin unchanged."""
    tmp = tmp_path_factory.mktemp("history")
    db = tmp / "wh.duckdb"
    for folder in nights(tmp / "runs", FORTY):
        load_run(folder, db)
    return db


def night(run_id: str) -> int:
    return int(run_id.rsplit("-n", 1)[1])


def test_planted_steps_found_at_their_nights(forty_nights: Path) -> None:
    con = open_warehouse(forty_nights, read_only=True)
    found = {
        (v, m, rule, night(r), d)
        for v, m, rule, r, d in con.execute(
            "select variant, metric, rule, run_id, direction from v_change_points"
        ).fetchall()
    }
    # Otava finds both steps at their nights; the band keeps quiet on a series of 6+ nights (one verdict per
    # change: Otava's); nothing at all on the unchanged reference, its speculative twin or any other series.
    assert found == {
        ("q3_k_m", "tpot_ms_mean", "otava", PLAN.tpot_step_night, "regression"),
        ("q2_k", "arithmetic.accuracy", "otava", PLAN.drop_night, "regression"),
    }
    # the band saw the accuracy drop outside its band, and says why it left the verdict to Otava
    assert con.execute("select variant, metric, night, band_note from stg_band where outside_band").fetchall() == [
        ("q2_k", "arithmetic.accuracy", PLAN.drop_night, "Otava judges series of 6+ nights")
    ]
    step = con.execute("""select mean_before, mean_after, change_pct, p_value, n_before, n_after, first_seen_run_id
                          from v_change_points where metric = 'tpot_ms_mean'""").fetchall()[0]
    before, after, pct, p, n_before, n_after, seen = step
    assert after / before == pytest.approx(1 + PLAN.tpot_step, abs=0.03) and pct == pytest.approx(10, abs=3)
    assert p < 1e-4 and (n_before, n_after) == (PLAN.tpot_step_night - 1, PLAN.nights - PLAN.tpot_step_night + 1)
    # Otava needs nights after a step: it first reported this one a few nights later, with that night's load
    assert PLAN.tpot_step_night < night(seen) <= PLAN.tpot_step_night + 5
    rules = dict(con.execute("select metric, rule from v_regressions where is_regression").fetchall())
    assert rules == {"tpot_ms_mean": "otava", "arithmetic.accuracy": "otava"}


def test_history_command_prints_series_and_change_points(forty_nights: Path, capsys) -> None:
    from flows.cli import main

    args = ["history", "--warehouse", str(forty_nights), "--all", "--variant", "q3_k_m", "--metric", "tpot_ms_mean"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"regression at run \S+-n30 \(2026-01-30\): 19[.\d]* -> 2[01][.\d]* \(\+\d+\.\d %; Otava p=", out)
    nights_listed = [ln for ln in out.splitlines() if ln.startswith("    2026-")]
    assert len(nights_listed) == PLAN.nights and "<- otava: regression" in nights_listed[PLAN.tpot_step_night - 1]
    assert main(["history", "--warehouse", str(forty_nights), "--all", "--config", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "q2_k arithmetic.accuracy" in out and out.count("regression at run") == 2
    assert main(["history", "--warehouse", str(forty_nights), "--config", "nope"]) == 1
    assert capsys.readouterr().err.strip() == "error: no history matches config nope; configs with history: nightly"


def test_history_summary_is_one_line_per_planted_change(forty_nights: Path, capsys) -> None:
    from flows.cli import main

    wh = ["history", "--warehouse", str(forty_nights)]
    assert main(wh) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "40 nights 2026-01-01..2026-02-09, 28 series (4 variants x 7 metrics), 2 change(s): 2 regression(s), "
        "0 improvement(s), newest first:"
    )
    changes = lines[1:-1]  # the last line says how to see more
    assert len(changes) == 2, changes  # the two planted steps; nothing from the 26 noise-only series
    assert re.fullmatch(
        r"  2026-01-30 q3_k_m \[llama\.cpp q3_k_m\] tpot_ms_mean: regression 19[.\d]* -> 2[01][.\d]* ms "
        r"\(\+\d+\.\d %; Otava p=\S+, 29 nights before / 11 after, first seen 2026-0[12]-\d\d\)",
        changes[0],
    )
    assert re.fullmatch(
        r"  2026-01-20 q2_k \[llama\.cpp q2_k\] arithmetic\.accuracy: regression 0\.5\d* -> 0\.4\d* fraction "
        r"\(-2\d\.\d %; Otava p=\S+, 19 nights before / 21 after\)",
        changes[1],
    )
    # --all: every series, with or without a change; the speculative twin is told apart from its plain twin
    assert main([*wh, "--all"]) == 0
    headers = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith(" ")]
    assert len(headers) == 28
    spec = [h for h in headers if h.startswith("q4_1-spec ")]
    plain = [h for h in headers if h.startswith("q4_1 ")]
    assert len(spec) == len(plain) == 7
    assert all(": llama.cpp q4_1 speculative prompt_lookup, hardware" in h for h in spec)
    assert all(": llama.cpp q4_1, hardware" in h for h in plain)

    def metrics_of(flags: list[str]) -> list[str]:
        assert main([*wh, *flags]) == 0
        return [re.search(r"\] (\S+):", ln)[1] for ln in capsys.readouterr().out.splitlines()[1:-1]]

    assert metrics_of(["--since", "2026-01-25"]) == ["tpot_ms_mean"]
    assert metrics_of(["--variant", "q2_k"]) == ["arithmetic.accuracy"]
    assert metrics_of(["--metric", "tpot_ms_mean"]) == ["tpot_ms_mean"]
    assert metrics_of(["--variant", "q4_1"]) == []
    assert main([*wh, "--since", "2026/01/25"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --since: '2026/01/25' is not a day; write it as YYYY-MM-DD, e.g. --since 2026-01-20"
    )


def test_history_of_one_night_is_two_lines(tmp_path: Path, capsys) -> None:
    """One night (the demo's first): what it covers and that nothing changed, not a line per series."""
    from flows.cli import main

    (folder,) = nights(tmp_path / "runs", PLAN, last=1)
    load_run(folder, tmp_path / "wh.duckdb")
    assert main(["history", "--warehouse", str(tmp_path / "wh.duckdb")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "1 night 2026-01-01, 21 series (3 variants x 7 metrics), no change",
        "every series: --all; one series night by night: --all --variant V --metric M",
    ]


def test_the_pick_changes_where_it_was_planted(forty_nights: Path) -> None:
    con = open_warehouse(forty_nights, read_only=True)
    picks = con.execute(
        "select run_id, recommended_variant, pick_changed from v_recommendation_history order by started_at"
    ).fetchall()
    assert len(picks) == PLAN.nights
    # q2_k, the fastest that passes the gate, until it loses 12 items; then q3_k_m, the next fastest
    assert [p for _, p, _ in picks] == ["q2_k"] * (PLAN.drop_night - 1) + ["q3_k_m"] * (
        PLAN.nights - PLAN.drop_night + 1
    )
    assert [night(r) for r, _, changed in picks if changed] == [PLAN.drop_night]


# stg_band on tiny tables: v_history's columns the band reads, one series per case, nights 1..len(values)
BAND_CASES = {
    # (metric, unit, n, repeats, values): the band's verdict on the last night, and its note
    "a change from one previous night is no verdict": (
        ("ttft_cv_pct", "%", 8, 2, [10.0, 13.6]),
        (False, "one previous night"),
    ),
    "one item of 40 on a low accuracy is binomial noise": (
        ("arithmetic.accuracy", "fraction", 40, 1, [0.025, 0.025, 0.025, 0.05]),
        # pooled p = 0.03125: 1.96 sqrt(p (1 - p) / 40) x sqrt(1 + 1/3) = 0.0623 > the 0.025 change
        (False, "own noise +/- 0.0623 covers the change"),
    ),
    "a jitter figure on 4 requests a repeat is its own noise": (
        ("ttft_cv_pct", "%", 8, 2, [10.0, 10.2, 9.9, 13.6]),
        # 1.96 x 13.6 / sqrt(2 (4 - 1)) x sqrt(1 + 1/3) = 12.6 > the 3.6-point change (+36 %)
        (False, "own noise +/- 12.6 covers the change"),
    ),
    "a 30-point drop on 100 items is a regression": (
        ("arithmetic.accuracy", "fraction", 100, 1, [0.70, 0.71, 0.69, 0.40]),
        (True, None),
    ),
    "a TPOT step without a noise of its own is judged by the band": (
        ("tpot_ms_mean", "ms", 8, 1, [20.0, 20.1, 19.9, 20.0, 26.0]),
        (True, None),
    ),
    "from the sixth night Otava judges": (
        ("tpot_ms_mean", "ms", 8, 1, [20.0, 20.1, 19.9, 20.0, 20.1, 26.0]),
        (False, "Otava judges series of 6+ nights"),
    ),
}


@pytest.mark.parametrize("case", list(BAND_CASES), ids=list(BAND_CASES))
def test_band_rule_speaks_only_where_otava_cannot_and_noise_does_not_cover(case: str) -> None:
    import duckdb

    (metric, unit, n, repeats, values), (flagged, note) = BAND_CASES[case]
    con = duckdb.connect()
    con.execute("""create table v_history (series_key varchar, metric varchar, higher_is_better boolean,
                   run_id varchar, started_at timestamp, value double, unit varchar, n integer, repeats integer,
                   ci_half_width double, night bigint)""")
    higher = metric == "arithmetic.accuracy"
    con.executemany(
        "insert into v_history values ('s', ?, ?, ?, timestamp '2026-01-01' + to_days(?), ?, ?, ?, ?, null, ?)",
        [(metric, higher, f"r{i}", i, v, unit, n, repeats, i + 1) for i, v in enumerate(values)],
    )
    con.execute(f"create view stg_band as {(ROOT / 'warehouse/views/staging/stg_band.sql').read_text()}")
    got = con.execute(
        "select outside_band, is_regression or is_improvement, band_note from stg_band order by night desc limit 1"
    ).fetchall()
    assert got == [(True, flagged, note)]


def test_html_report_shows_the_history_in_headless_chromium(forty_nights: Path, tmp_path: Path) -> None:
    from tasks.report.html import write_html

    con = open_warehouse(forty_nights, read_only=True)
    last = con.execute("select run_id from runs order by started_at desc limit 1").fetchall()[0][0]
    page = write_html(con, last, tmp_path / "report.html")
    text = page.read_text()
    section = text[text.index("<h2>History") : text.index("<h2>Items lost")]
    # tok/s, TPOT, TTFT p99, the primary quality metric, the pick over the nights
    assert section.count("<svg") == 5
    rows = re.findall(
        r"<tr>(.*?)</tr>",
        section[section.index("Change points of these series") : section.index("The pick of each night")],
    )
    assert len(rows) == 3 and "tpot_ms_mean" in rows[1] and "-n30" in rows[1]  # header, then newest first
    assert "the pick changed: 2026-01-20 to q3_k_m</p>" in section  # the planted change, under its timeline
    assert section.count("q3_k_m</td>") + section.count("q2_k</td>") >= 30  # a pick per night, latest 30
    assert "12 regression" in text[text.index("<h2>Items lost") :]
    # tables for people: grouped headings, labels with units, raw names in the tooltips, 3 significant digits
    table = text[text.index("<h2>Trade-off table") : text.index("<h2>Takeaways")]
    for heading in ("speed", "latency (headline step)", "jitter", "quality", "cost"):
        assert f'class="grp">{heading}</th>' in table
    assert '<th class="" title="tpot_ms_mean">TPOT (ms/token)</th>' in table
    assert '<th class="" title="quality">arithmetic.accuracy (fraction)</th>' in table
    assert not re.search(r">\d+\.\d{4,}<", table)  # no 0.3399-style digits
    widths = widths_in_chromium(page, tmp_path, 1400)
    assert widths["page"] <= widths["window"]
    boxes = {heading: (scroll, box) for heading, scroll, box in widths["boxes"]}
    assert {"Trade-off table", "Every quality metric"} <= set(boxes) and len(boxes) >= 4
    wide = {heading: w for heading, w in boxes.items() if w[0] > w[1]}
    assert not wide, wide  # the decision, trade-off and every other table fit 1400 px: no sideways scroll
    shot = render_in_chromium(page, tmp_path, 1400)
    print(f"\nreport at 1400 px: {shot}")


def test_renamed_config_keeps_its_history_and_a_new_model_starts_a_new_one(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    plan = replace(PLAN, nights=9, engine_version_from={7: "llama-cpp-python 0.3.40"})
    folders = nights(tmp_path / "runs", plan, last=5)
    folders += nights(tmp_path / "runs", replace(plan, config_name="nightly-v2"), first=6, last=7)
    folders += nights(tmp_path / "runs", replace(plan, config_name="nightly-v2", model="smollm2-360m"), first=8)
    for folder in folders:
        load_run(folder, db)
    con = open_warehouse(db, read_only=True)
    series = con.execute("""
        select series_key, list(distinct config_name order by config_name), count(*), min(started_at)
        from v_history where variant = 'q4_1' and metric = 'tpot_ms_mean' group by series_key order by 4""").fetchall()
    assert [(names, n) for _, names, n, _ in series] == [(["nightly", "nightly-v2"], 7), (["nightly-v2"], 2)]
    causes = con.execute("""select run_id, known_cause from v_history
                            where variant = 'q4_1' and metric = 'tpot_ms_mean'
                              and known_cause is not null""").fetchall()
    assert [(night(r), c) for r, c in causes] == [
        (7, "engine version llama-cpp-python 0.3.36 -> llama-cpp-python 0.3.40")
    ]
    # the pick's history follows the reference's series the same way
    picks = con.execute(
        "select series_key, count(*) from v_recommendation_history group by 1 order by 2 desc"
    ).fetchall()
    assert [n for _, n in picks] == [7, 2] and picks[0][0] == series[0][0]


FLIPS_QUERY = "-- 4. Which items did q2_k lose that q4_1 got right, and were they lost on both nights?"


def documented_flips_query() -> str:
    """The query docs/warehouse.md gives for the demo's warehouse after two nights (and the README, where it does)."""
    queries = []
    for doc in (ROOT / "docs" / "warehouse.md", ROOT / "README.md"):
        text = doc.read_text()
        start = text.find(FLIPS_QUERY)
        if start >= 0:
            queries.append(text[start : text.index(";", start)])
    assert queries and len(set(queries)) == 1, len(queries)  # documented, and the same wherever it is
    return queries[0]


def test_documented_flips_query_on_two_nights(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    # the 12 items q2_k loses from night 2 on were right on night 1: lost on one night only
    for folder in nights(tmp_path / "runs", replace(PLAN, nights=2, drop_night=2, config_name="demo")):
        load_run(folder, db)
    con = open_warehouse(db, read_only=True)
    rows = con.execute(documented_flips_query()).fetchall()
    names = [d[0] for d in con.description]
    got = {r[names.index("sample_id")]: r for r in rows}
    lost_both = {s for s, r in got.items() if r[names.index("nights_lost")] == 2}
    lost_once = {s for s, r in got.items() if r[names.index("nights_lost")] == 1}
    assert {f"{i:03d}" for i in range(PLAN.drop_items)} <= lost_once
    # q4_1 answers items 0-67 right every night, q2_k 12-49 plus some of its flaky 50-57: 58-67 are lost both nights
    assert {f"{i:03d}" for i in range(58, 68)} <= lost_both
    assert all(r[names.index("prompt")].startswith("What is") for r in rows)


def test_without_otava_the_load_keeps_the_keys_and_the_band_rule(tmp_path: Path, monkeypatch, capsys) -> None:
    import warehouse.history

    monkeypatch.setattr(warehouse.history, "otava_available", lambda: "apache-otava 0.8.0 not importable (test)")
    db = tmp_path / "wh.duckdb"
    # the band judges a series' nights 3 to 5 (Otava, missing here, would judge the rest)
    for folder in nights(tmp_path / "runs", replace(PLAN, nights=8, drop_night=5)):
        load_run(folder, db)
    assert "warning: change points not computed: apache-otava 0.8.0 not importable (test)" in capsys.readouterr().err
    con = open_warehouse(db, read_only=True)
    assert con.execute("select count(*) from change_points").fetchall() == [(0,)]
    assert con.execute("select count(distinct run_id) from series_keys").fetchall() == [(8,)]
    assert con.execute("select variant, metric, rule, run_id from v_change_points").fetchall() == [
        (
            "q2_k",
            "arithmetic.accuracy",
            "band",
            con.execute("select run_id from runs order by started_at limit 1 offset 4").fetchall()[0][0],
        )
    ]


def test_notification_and_text_report_name_the_change_point(forty_nights: Path) -> None:
    from tasks.report.notify import regressions, run_message
    from tasks.report.text import format_report

    con = open_warehouse(forty_nights, read_only=True)
    seen = con.execute("select first_seen_run_id from v_change_points where metric = 'tpot_ms_mean'").fetchall()[0][0]
    lines = regressions(forty_nights, seen)  # the night whose load found the TPOT step, a few nights after it
    assert len(lines) == 1 and re.match(
        r"q3_k_m tpot_ms_mean: otava regression at run \S+-n30 \(2026-01-30\): .*"
        r"Otava p=\S+, 29 nights before / \d+ after\)$",
        lines[0],
    )
    subject, body = run_message(seen, "ok", [], {}, lines)
    assert subject.endswith("1 regression") and "Regressions (v_change_points):\n- q3_k_m tpot_ms_mean" in body
    drop = con.execute("select run_id from runs order by started_at limit 1 offset ?", [PLAN.drop_night - 1]).fetchall()
    # the accuracy drop is named once, by Otava on its own night (the band no longer repeats it: one verdict)
    assert [ln.split(":")[:2] for ln in regressions(forty_nights, drop[0][0])] == [
        ["q2_k arithmetic.accuracy", " otava regression at run 20260120T020000Z-nightly-n20 (2026-01-20)"]
    ]
    text = format_report(con)
    assert re.search(r"^q2_k lost \d+ item\(s\) q4_1 got right \(.*\b12 regression\b", text, re.M)


def test_a_flipped_items_prompt_is_shown_by_its_end() -> None:
    """Few-shot prompts share their start: the line shows the question at the end, on one line."""
    from tasks.report.history import _clip

    prompt = "Q: What is 9 plus 6? A: 15\nQ: What is 9 minus 3? A: 6\n" * 4 + "Q: What is 7 times 8? A:"
    shown = _clip(prompt, 40, tail=True)
    assert len(shown) == 40 and shown.startswith("…") and shown.endswith("Q: What is 7 times 8? A:")
    assert _clip(prompt, 40) == prompt.replace("\n", " ")[:39] + "…" and _clip("short", 40, tail=True) == "short"


def test_otava_is_installed_out_of_pips_view_and_pip_check_is_clean() -> None:
    # the Makefile installs the version warehouse.history names
    assert re.search(rf"^OTAVA := apache-otava=={re.escape(OTAVA_VERSION)}$", (ROOT / "Makefile").read_text(), re.M)
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout
    assert "apache-otava" not in listed.lower()  # so its numpy 2.2 / scipy 1.16 pins cannot break `pip check`
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
