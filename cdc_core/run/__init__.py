"""The run cycle and operator actions on top of capture, coordination and lake.

Layers: docs/architecture.md."""
