"""Fingerprint of a data source's content, for the cache key of data preparation."""
