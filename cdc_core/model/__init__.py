"""Pure values and rules: positions, plans, manifests, types, configuration, errors (no I/O, no services).

Layers: docs/architecture.md."""
