"""DEIM: D-FINE's network trained with dense one-to-one matching and a matchability-aware loss."""
