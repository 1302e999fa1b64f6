"""PicoDet: ESNet backbone, CSP-PAN neck, GFL head; SimOTA assignment with varifocal loss."""
