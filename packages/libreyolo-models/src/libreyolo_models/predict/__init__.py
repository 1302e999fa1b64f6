"""Inference: reading sources, letterboxing, results objects and plotting."""
