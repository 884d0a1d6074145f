"""Shared test helpers, imported by test modules as tests.support.<module>."""
