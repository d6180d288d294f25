"""Units of work of tradeoff: configs, engines, measurement, quality suites, validation, reports."""
