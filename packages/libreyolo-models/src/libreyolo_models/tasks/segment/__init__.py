"""Instance segmentation: one mask per object (YOLO polygons or COCO JSON with polygons / RLE),
mask mAP, ``Results.masks`` (``task.SegmentTask`` is the declaration the jobs call)."""
