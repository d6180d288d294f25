"""Orchestration on Prefect: every @task, run and variant bookkeeping, fan-out on a work pool, GPU limits, the results
location."""
