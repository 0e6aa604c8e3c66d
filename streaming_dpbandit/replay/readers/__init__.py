"""Readers of logged streams."""
