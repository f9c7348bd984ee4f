"""Builds klake's compiled part, the record codec (`engine/format/_codec.pyx`, Cython); everything else is
in pyproject.toml."""

from __future__ import annotations

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("engine.format._codec", ["engine/format/_codec.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": 3},
    ),
)
