"""Helpers for tests/test_harnesses.py: real harnesses run against the fake model and
replay-server, each as the command a user would type."""
