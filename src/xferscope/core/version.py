"""xferscope's version: one place, at the bottom of the import graph (every result document
records it; pyproject.toml reads it from here)."""

__version__ = "0.1.0"
