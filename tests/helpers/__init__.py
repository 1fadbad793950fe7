"""Helpers the test modules share (imported as `tests.helpers.<module>`, like tests/storegen.py)."""
