"""Prefect flows of tradeoff: they only compose the units of work in tasks/."""
