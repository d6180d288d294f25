"""`to_table` writes exactly the contract's columns: a key it does not declare is an error, never dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from warehouse.contract import SCHEMAS, UnknownColumns, to_table, write_table


def test_a_misspelt_key_names_the_table_the_key_and_the_close_match() -> None:
    with pytest.raises(UnknownColumns) as err:
        to_table("runs", [{"run_id": "r1", "config_nam": "c"}])
    msg = str(err.value)
    assert msg.startswith("table runs: 1 key not in its contract: 'config_nam' (did you mean 'config_name'?)")


def test_every_unknown_key_of_every_row_is_named() -> None:
    with pytest.raises(UnknownColumns, match=r"table runs: 2 keys not in its contract: 'bogus', 'zz_extra'"):
        to_table("runs", [{"run_id": "r1", "zz_extra": 1}, {"run_id": "r2", "bogus": 2}])


def test_unknown_keys_write_no_part(tmp_path: Path) -> None:
    with pytest.raises(UnknownColumns):
        write_table(tmp_path, "runs", "p0", [{"run_id": "r1", "typo_column": 1}])
    assert list(tmp_path.rglob("*.parquet*")) == []


def test_declared_keys_still_load_and_missing_ones_are_null() -> None:
    t = to_table("runs", [{"run_id": "r1"}])
    assert t.schema == SCHEMAS["runs"]
    assert t.column("run_id").to_pylist() == ["r1"]
    assert all(t.column(c).to_pylist() == [None] for c in t.column_names if c != "run_id")
