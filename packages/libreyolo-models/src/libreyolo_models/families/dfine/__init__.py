"""D-FINE: a DETR whose decoder refines boxes as edge-offset distributions (fine-grained distribution refinement)."""
