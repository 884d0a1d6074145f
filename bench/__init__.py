"""Benchmark harness of the "Performance" issue: `python -m bench` (see bench/README.md).

Never part of the test suite: no `test_` files, not under tests/.
"""
