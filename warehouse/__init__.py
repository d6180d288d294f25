"""DuckDB warehouse of run results: numbered schema migrations, one `.sql` file per view, and the loader."""
