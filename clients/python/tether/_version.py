"""The package's version: Tether's (internal/version.Version without its "v")."""

__version__ = "0.1.0"
