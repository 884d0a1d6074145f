"""Benchmark harness of the "Performance" issue (run `python bench/run.py`; see bench/README.md).

Never part of the test suite: no `test_` files, not under tests/.
"""
