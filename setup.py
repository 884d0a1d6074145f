"""The compiled row walk of the binlog decoder (cdc_core/capture/_rowscan.c) and the transforms' HMAC kernel
(cdc_core/model/_hmac.c); everything else is in pyproject.toml. Optional: without a C compiler the decoder runs
the same walk in Python, and hashing uses hashlib."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cdc_core.capture._rowscan",
            ["cdc_core/capture/_rowscan.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "cdc_core.model._hmac",
            ["cdc_core/model/_hmac.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ]
)
