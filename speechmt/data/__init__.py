"""Manifests, corpus preparation, feature stores, datasets and batching."""
