"""clinjudge: judge AI-written clinical text with LLMs and measure agreement with physicians."""

from clinjudge._offline import configure_offline_environment

configure_offline_environment()

__version__ = "0.1.0"

__all__ = ["__version__"]
