"""The compiled row walk of the binlog decoder (cdc_core/capture/_rowscan.c); everything else is in
pyproject.toml. Optional: without a C compiler the decoder runs the same walk in Python."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cdc_core.capture._rowscan",
            ["cdc_core/capture/_rowscan.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        )
    ]
)
