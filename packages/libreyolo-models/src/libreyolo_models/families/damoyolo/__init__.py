"""DAMO-YOLO detection family (TinyNAS + RepGFPN + ZeroHead): sizes ns, nm, nl, t, s, m, l."""
