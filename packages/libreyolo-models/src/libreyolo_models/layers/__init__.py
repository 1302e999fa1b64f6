"""Building blocks shared by more than one family (a block two families need lives here)."""
