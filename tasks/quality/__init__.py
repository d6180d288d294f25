"""Quality: the suite interface, the suite loop shared by the nightly and `tradeoff quality`, paired deltas, the
suites."""
