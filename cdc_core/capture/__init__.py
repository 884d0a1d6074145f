"""Reading the source: SQL facts, the start resolver, the binlog reader and decoders, snapshot reads.

Layers: docs/architecture.md."""
