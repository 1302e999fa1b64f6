"""RTMDet's input normalisation, as data (no torch import: the declaration and the network read it).

ImageNet statistics in RGB order on [0, 1]: upstream's 0-255 BGR values (mean 103.53, 116.28,
123.675; std 57.375, 57.12, 58.395), reordered and scaled. The network applies them itself, then
flips to the BGR channel order its weights were trained on (``nn.InputBGR``).
"""

MEAN_RGB = (0.485, 0.456, 0.406)
STD_RGB = (0.229, 0.224, 0.225)
