"""Monocular depth (``depth``): a relative depth map per picture, colour-mapped for display (inference only)."""
