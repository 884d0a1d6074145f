"""Spark jobs (run with spark-submit; importable for tests). Only this package imports pyspark."""
