"""Code that runs outside the project's own environment: before it is installed, or in an engine's."""
