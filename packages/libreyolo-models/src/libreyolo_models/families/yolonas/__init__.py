"""YOLO-NAS: QARepVGG backbone, PAN neck, DFL heads; task-aligned assignment with varifocal loss."""
