"""YOLOv9 (GELAN) detection family: sizes t, s, m, c."""
