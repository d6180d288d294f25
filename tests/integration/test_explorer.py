"""The report's decision explorer (tasks/report/explorer.py, explorer.js): every setting the page offers gives the
pick, verdicts and reasons `tradeoff recommend` gives with that setting's flags; the page works offline; the grid
leaves the warehouse and the connection as it found them."""

from __future__ import annotations

import html
import json
import random
import re
import shlex
from datetime import timedelta
from pathlib import Path

import pytest

from tasks.report.explorer import SLO_COLUMNS, decide, explorer_data
from tests.helpers import ROOT, dom_in_chromium
from tests.helpers.decision_run import STARTED, what_if_run, write_decision_run
from tests.helpers.queries import rows
from warehouse.db import load_run, open_warehouse

RUN = "w1"
SETTINGS = 20  # random settings of the grid checked against the command, seeded


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two nights of what_if_run, the earlier decided under other settings: a grid that read across runs would
    show it."""
    tmp = tmp_path_factory.mktemp("explorer")
    db = tmp / "wh.duckdb"
    earlier = STARTED - timedelta(days=1)
    load_run(
        write_decision_run(tmp / "runs", "w0", what_if_run(), {"optimise": "tps", "retention": 0.999}, earlier), db
    )
    load_run(write_decision_run(tmp / "runs", RUN, what_if_run(), decision={}), db)
    return db


@pytest.fixture(scope="module")
def page(warehouse: Path) -> Path:
    from tasks.report.html import write_html

    with open_warehouse(warehouse, read_only=True) as con:
        return write_html(con, RUN, warehouse.parent / "report.html")


def page_data(page: Path) -> dict:
    """The explorer's JSON as the page holds it."""
    found = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page.read_text(), re.S)
    return json.loads(found[1])


def setting_of(data: dict, index: int) -> dict[str, str]:
    """The controls' value keys of the grid's point `index` (the last control varies fastest)."""
    keys = {}
    for c in reversed(data["controls"]):
        index, i = divmod(index, len(c["keys"]))
        keys[c["key"]] = c["keys"][i]
    return dict(reversed(keys.items()))


def index_of(data: dict, picked: list[int]) -> int:
    """The grid index of one value index per control."""
    index = 0
    for c, i in zip(data["controls"], picked):
        index = index * len(c["keys"]) + i
    return index


def flags_of(setting: dict[str, str]) -> list[str]:
    """The `tradeoff recommend` flags a setting stands for, written here from the control keys alone."""
    limits = [f"{k}={setting[k]}" for k in ("ttft_ms", "tpot_ms", "e2el_ms") if setting[k] != "none"]
    gate = setting["gate"]
    return [
        *(["--slo", ",".join(limits)] if limits else []),
        *("--percentile", setting["percentile"]),
        *(("--margin-points", gate[1:]) if gate[0] == "m" else ("--retention", gate[1:])),
        *("--optimise", setting["optimise"]),
    ]


# Appended to a copy of the page: each setting chosen on the controls as a person would, then what the page shows.
PROBE = """<script>addEventListener('load', () => {
  const out = SETTINGS.map((setting) => {
    Object.entries(setting).forEach(([k, v]) => { document.getElementById('explorer-' + k).value = v; });
    document.getElementById('explorer-optimise').dispatchEvent(new Event('change'));
    const pick = document.getElementById('explorer-pick');
    const rows = [...document.querySelectorAll('#explorer-verdicts tr[data-variant]')];
    return {pick: pick.dataset.pick, head: pick.textContent,
            flags: document.getElementById('explorer-flags').textContent,
            rows: rows.map((tr) => [tr.dataset.variant, tr.querySelector('.verdict').textContent,
                                    tr.querySelector('.reason').textContent])};
  });
  const pre = document.createElement('pre'); pre.id = 'explorer-probe'; pre.textContent = JSON.stringify(out);
  document.body.append(pre);
});</script>"""


def command(db: Path, argv: list[str], capsys: pytest.CaptureFixture) -> tuple[list[str], list[list[str]], str | None]:
    """`tradeoff recommend` with `argv`: its printed lines (run in-process), and its rows (variant, verdict, reason)
    and pick, read from v_recommendation under the same flags as the command reads them."""
    from flows.cli import main, parser
    from tasks.decision.what_if import apply_overrides
    from tasks.report.recommend import overrides_from_args, recommendation_frame, settings

    # --explain: the full text, whose first sentence the page shows (the default screen words it shorter)
    assert main(["recommend", "--warehouse", str(db), "--run", RUN, "--stability", "0", "--explain", *argv]) == 0
    printed = capsys.readouterr().out.splitlines()
    overrides = overrides_from_args(parser().parse_args(["recommend", *argv]))
    with open_warehouse(db, read_only=True) as con:
        apply_overrides(con, settings(con, RUN, overrides), overrides)
        df = recommendation_frame(con, RUN)
    picks = set(df["recommended_variant"].dropna())
    return (
        printed,
        df[["variant", "verdict", "verdict_reason"]].fillna("").values.tolist(),
        picks.pop() if picks else None,
    )


def test_every_setting_the_page_shows_is_what_the_command_says(
    page: Path, warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = page_data(page)
    # the grid: every combination of the controls' values, the run's own setting among them
    assert len(data["points"]) == 512 and [len(c["keys"]) for c in data["controls"]] == [4, 2, 1, 4, 4, 4]
    chosen = random.Random(48).sample(range(len(data["points"])), SETTINGS)
    asked = [setting_of(data, i) for i in chosen]
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE.replace("SETTINGS", json.dumps(asked)) + "</body>"))
    found = re.search(r'<pre id="explorer-probe">(.*?)</pre>', dom_in_chromium(probe, tmp_path), re.S)
    assert found
    shown = json.loads(html.unescape(found[1]))
    picks = set()
    for setting, got in zip(asked, shown):
        argv = flags_of(setting)
        assert got["flags"] == f"tradeoff recommend --run {RUN} {shlex.join(argv)}"
        printed, verdicts, pick = command(warehouse, argv, capsys)
        assert got["head"] in printed, (argv, got["head"])  # the command's own first sentence
        assert (got["pick"] or None, got["rows"]) == (pick, verdicts), argv
        picks.add(pick)
    assert len(picks) >= 3, picks  # the settings drawn move the pick: the comparison is not of one answer


def test_the_page_works_offline_at_a_linked_setting(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    # nothing loaded from elsewhere: no remote src/href/url() (the plots' clip paths are the page's own), no script
    # with a src, nothing fetched by script
    assert not re.search(r'(src|href)="(https?:)?//', text) and not re.search(r"url\(\s*['\"]?(?!#)", text)
    assert not re.search(r"<script[^>]*\bsrc=", text)
    assert not re.search(r"\b(fetch|XMLHttpRequest|WebSocket|EventSource|importScripts)\b|import\(", text)
    data = page_data(page)
    setting = {"ttft_ms": "1000", "percentile": "90", "gate": "m5"}  # the other controls at the run's own
    point = data["points"][
        index_of(
            data,
            [c["keys"].index(setting[c["key"]]) if c["key"] in setting else c["default"] for c in data["controls"]],
        )
    ]
    dom = dom_in_chromium(
        page,
        tmp_path,
        "--host-resolver-rules=MAP * ~NOTFOUND",
        fragment="#" + "&".join(f"{k}={v}" for k, v in setting.items()),
    )
    assert f'<p id="explorer-pick" data-pick="{data["variants"][point["pick"]]}">' in dom
    assert f'id="explorer-flags">tradeoff recommend --run {RUN} {point["flags"]}</code>' in dom
    assert data["variants"][point["pick"]] == "q5_k"  # p90 shows q5_k's 60 requests enough; p99 does not


def test_the_grid_leaves_the_warehouse_and_the_connection_as_found(warehouse: Path) -> None:
    catalog = "select database_name, schema_name, view_name, sql from duckdb_views() where not internal order by all"
    # a writable connection: the grid writes nothing but temp objects of its own, dropped after
    with open_warehouse(warehouse) as con:
        before = (rows(con, catalog), rows(con, "select * from v_recommendation order by all"))
        data = explorer_data(con, RUN)
        assert rows(con, "select * from duckdb_tables() where temporary") == []
        assert (rows(con, catalog), rows(con, "select * from v_recommendation order by all")) == before
    assert data["seconds"] < 60 and len(data["points"]) == 512
    # the run's own setting is the page's default, and it is what the command says with no flags
    default = data["points"][index_of(data, [c["default"] for c in data["controls"]])]
    with open_warehouse(warehouse, read_only=True) as con:
        (own,) = decide(con, RUN, [[]])
        assert (own.verdict.tolist(), data["variants"][default["pick"]]) == (
            [data["strings"][r[1]] for r in default["rows"]],
            own.recommended_variant.iloc[0],
        )


def test_the_slo_is_judged_once_per_slo_setting_because_it_reads_only_the_slo_columns() -> None:
    # tasks.report.explorer shares v_slo_steps between settings that agree on SLO_COLUMNS: it may, as long as
    # v_slo_steps reads v_decision once, in its `decision` CTE, and only those columns there
    sql = "\n".join(
        line.split("--")[0] for line in (ROOT / "tasks/decision/sql/v_slo_steps.sql").read_text().splitlines()
    )
    assert sql.count("v_decision") == 1
    (columns,) = re.findall(r"decision as \(\s*select (.*?)\s+from v_decision\s*\)", sql, re.S)
    assert {c.strip() for c in columns.split(",")} == {"run_id", *SLO_COLUMNS}
