"""Environments: discovery (source scan), config introspection (child process) and bundled ones."""
