"""YOLOX detection family: sizes n, t, s, m, l, x (CSPDarknet + PAFPN, decoupled head, SimOTA)."""
