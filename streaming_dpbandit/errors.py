"""Errors shared by the command line and the configuration (importable without pydantic)."""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A user-facing configuration error (printed as one line by the CLI)."""
