"""Performance: workloads, load sweeps, metrics with vLLM's definitions, energy, roofline, the one perf run."""
