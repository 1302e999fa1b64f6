"""Text reading (``ocr``): text lines found in a picture, each a quadrilateral with its text and confidence (inference only)."""
