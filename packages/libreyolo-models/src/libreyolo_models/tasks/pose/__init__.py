"""Pose estimation: objects with boxes and keypoints (YOLO keypoint labels or COCO keypoints JSON),
OKS mAP, ``Results.keypoints`` (``task.PoseTask`` is the declaration the jobs call)."""
