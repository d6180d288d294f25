"""Warehouse errors meant for users, and the DuckDB messages that mean the file itself is damaged."""

from __future__ import annotations

import re

REBUILD_HINT = "rebuild it from the run folders with `tradeoff warehouse rebuild`"

# What DuckDB says when the database file (or its WAL) is damaged, e.g. after a checkpoint hit a full
# disk (duckdb issue #9667): checked before any "lock" test, as "in block at location" contains "lock".
_DAMAGED = re.compile(
    r"Corrupt database file|does not match stored checksum|not a valid DuckDB database"
    r"|Could not read enough bytes from file|Failure while replaying WAL|INTERNAL Error.*(block|checksum|storage)",
    re.IGNORECASE,
)


class WarehouseError(RuntimeError):
    """A problem with the warehouse, with a one-line message meant for users."""


def is_damaged(message: str) -> bool:
    """Whether a DuckDB error message says the database file cannot be read back."""
    return bool(_DAMAGED.search(message))


def damaged(path: object, message: str) -> WarehouseError:
    """The one-line error for a warehouse file that cannot be opened or read."""
    first = message.splitlines()[0] if message else "unreadable"
    return WarehouseError(
        f"warehouse {path} cannot be read ({first}); {REBUILD_HINT}, or point TRADEOFF_WAREHOUSE at another file"
    )
