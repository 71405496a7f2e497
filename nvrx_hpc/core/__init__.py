"""Core layer: configuration, wire protocol, errors and exit codes shared by every process."""
