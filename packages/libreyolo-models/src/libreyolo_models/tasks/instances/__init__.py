"""What the instance tasks (segment, pose) share: their checked split, the sample geometry that
carries masks and keypoints through mosaic, affine and flips, the pipelines, COCO matching by any
similarity (with ignored ground truth) and the box-plus-kind metrics. Not a task itself."""
