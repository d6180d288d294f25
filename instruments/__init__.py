"""Measuring instruments of the tests and the benchmarks: servers whose behaviour is known (paced SSE, a single slot
of known capacity, a fault-injecting proxy), synthetic nightly histories, and `tradeoff` commands run as a shell
runs a job and found in /proc. Not part of the product: nothing under tasks/, flows/ or warehouse/ imports them."""
