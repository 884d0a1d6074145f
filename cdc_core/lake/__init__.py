"""The lake side: staging, Delta state without Spark, the object store, the Spark job spec.

Layers: docs/architecture.md."""
