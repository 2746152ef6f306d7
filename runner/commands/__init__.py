"""The subcommands of `ootci`, one module each (runner/cli.py lists them).

Owns argument parsing and the one-line usage errors of each command; the work is the
concern packages'. May import every package of runner/ and the dashboard; nothing imports
a command but the command line.
"""
