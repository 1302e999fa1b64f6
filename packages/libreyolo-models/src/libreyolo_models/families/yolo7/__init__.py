"""YOLOv7 detection family (official YOLOv7-tiny, YOLOv7, YOLOv7-X): sizes tiny, base, x."""
