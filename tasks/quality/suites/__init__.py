"""Quality suites, one module each; tasks.loader registers them."""
