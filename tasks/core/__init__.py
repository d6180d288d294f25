"""The core: config models, errors, registries, child processes, run identity. Leaves: they import nothing else of the
project."""
