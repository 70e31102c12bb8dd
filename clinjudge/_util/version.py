"""The package version, importable without loading the public API (``clinjudge._api``)."""

__version__ = "0.1.0"
