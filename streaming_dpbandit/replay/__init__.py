"""Offline replay of logged streams: readers, the replay method, off-policy estimators."""
