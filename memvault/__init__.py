"""memvault: a memory server for AI agents over markdown files."""

__version__ = "0.1.0"
