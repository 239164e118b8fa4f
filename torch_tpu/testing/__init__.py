"""Helpers for running other projects' test suites on the tpu device."""
