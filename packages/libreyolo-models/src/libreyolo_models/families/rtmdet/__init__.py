"""RTMDet: CSPNeXt backbone, CSPNeXt PAFPN neck, shared-conv separated-BN head; dynamic soft-label assignment."""
