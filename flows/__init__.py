"""Prefect flows of tradeoff and the `tradeoff` CLI: they only compose the units of work in tasks/.

The environment defaults below are set before any flow module imports Prefect or GX.
"""

import os

# Prefect's ephemeral API was seen to need ~20 s to start on a loaded 2-core machine;
# its default start-up timeout (20 s) then fails the run before it begins.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
# Prefect's usage telemetry: offline it logs "ERROR ... Failed to send telemetry" on every run.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
