"""Command line: argv to an operation, runc-compatible."""
