"""Subcommands of the costlab command line, one module per command."""
