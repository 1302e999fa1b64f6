"""RT-DETRv4: D-FINE's layout with SiLU, trained as DEIM (upstream's student detectors)."""
