"""PP-OCRv4 mobile (PaddleOCR, Apache-2.0): a DB text detector and an SVTR-CTC line recogniser."""
