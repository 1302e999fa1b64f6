"""YOLOv9-E2E (NMS-free YOLOv9) detection family: sizes t, s, m, c."""
