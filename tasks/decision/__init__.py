"""The decision: the ship rules (docs/architecture.md). Perf and quality measure; this package judges.

Each rule is made twice: in SQL over the warehouse (sql/, loaded with the warehouse's views), which decides, and in
Python, which steers a run while it goes (a claim that is met stops its step; a gate that is settled stops its suite).
A test per pair holds the two equal.
"""

from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"  # the decision's views; warehouse.db creates them with the others
