"""The GELAN building blocks of YOLOv9 and YOLOv9-E2E (ELAN, RepNCSP-ELAN, downsamplers, SPP-ELAN).

Shared here because both families build the same backbone and neck from them. Attribute names (``cv1`` .. ``cv5``, ``m``, ``conv1``/``conv2``, ``cv``) are checkpoint keys of
upstream LibreYOLO weights; they are kept even where a clearer name exists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conv import Conv, SiLU
from .fuse import merge_parallel_convs


class RepConvN(nn.Module):
    """3x3 and 1x1 conv-BN branches summed before one SiLU (re-parameterizable into one conv)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = Conv(c_in, c_out, 3, act=False)
        self.conv2 = Conv(c_in, c_out, 1, act=False)
        self.act = SiLU()

    def forward(self, x: Tensor) -> Tensor:
        if self._modules["conv2"] is None:  # merged by fuse_for_inference; registry read directly (Conv.forward)
            return self.act(self._modules["conv1"](x))  # type: ignore[misc]
        return self.act(self.conv1(x) + self.conv2(x))

    def fuse_for_inference(self) -> bool:
        """Merge the (already BN-folded) 1x1 branch into the 3x3 one: one convolution instead of two."""
        if self.conv2 is None:
            return False
        self.conv1.fuse_for_inference()
        self.conv2.fuse_for_inference()
        merge_parallel_convs(self.conv1.conv, self.conv2.conv)
        self.conv2 = None  # type: ignore[assignment]  # merged into conv1: the branch is gone
        return True


class RepNBottleneck(nn.Module):
    """Residual bottleneck: RepConvN then a 3x3 conv, added to the input."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.cv1 = RepConvN(c, c)
        self.cv2 = Conv(c, c, 3)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.cv2(self.cv1(x))


class RepNCSP(nn.Module):
    """Cross-stage partial block: one half through ``n`` bottlenecks, the other straight, fused."""

    def __init__(self, c_in: int, c_out: int, n: int) -> None:
        super().__init__()
        hidden = c_out // 2
        self.cv1 = Conv(c_in, hidden, 1)
        self.cv2 = Conv(c_in, hidden, 1)
        self.cv3 = Conv(2 * hidden, c_out, 1)
        self.m = nn.Sequential(*(RepNBottleneck(hidden) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class ELAN1(nn.Module):
    """Light ELAN (sizes t/s): split, two chained 3x3 convs, concatenate all four parts."""

    def __init__(self, c_in: int, c_out: int, c_mid: int, c_branch: int) -> None:
        super().__init__()
        self.cv1 = Conv(c_in, c_mid, 1)
        self.cv2 = Conv(c_mid // 2, c_branch, 3)
        self.cv3 = Conv(c_branch, c_branch, 3)
        self.cv4 = Conv(c_mid + 2 * c_branch, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return _split_chain_concat(self, x)


def _split_chain_concat(block: ELAN1 | RepNCSPELAN4, x: Tensor) -> Tensor:
    """ELAN data flow: split ``cv1(x)`` in two, feed the second half through ``cv2`` then ``cv3``,
    concatenate all four parts and fuse them with ``cv4``."""
    parts = list(block.cv1(x).chunk(2, 1))
    parts.append(block.cv2(parts[-1]))
    parts.append(block.cv3(parts[-1]))
    return block.cv4(torch.cat(parts, 1))


class RepNCSPELAN4(nn.Module):
    """GELAN block: split, two chained (RepNCSP + 3x3 conv) branches, concatenate all four parts."""

    def __init__(self, c_in: int, c_out: int, c_mid: int, c_branch: int, n: int) -> None:
        super().__init__()
        self.cv1 = Conv(c_in, c_mid, 1)
        self.cv2 = nn.Sequential(RepNCSP(c_mid // 2, c_branch, n), Conv(c_branch, c_branch, 3))
        self.cv3 = nn.Sequential(RepNCSP(c_branch, c_branch, n), Conv(c_branch, c_branch, 3))
        self.cv4 = Conv(c_mid + 2 * c_branch, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return _split_chain_concat(self, x)


class AConv(nn.Module):
    """Downsample by 2: a 2x2 stride-1 average pool, then a 3x3 stride-2 conv (sizes t/s/m)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.cv = Conv(c_in, c_out, 3, 2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv(F.avg_pool2d(x, 2, 1, 0, False, True))


class ADown(nn.Module):
    """Downsample by 2 in two halves: a 3x3 stride-2 conv and a max-pool + 1x1 conv (size c)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        half = c_out // 2
        self.cv1 = Conv(c_in // 2, half, 3, 2, 1)
        self.cv2 = Conv(c_in // 2, half, 1, 1, 0)

    def forward(self, x: Tensor) -> Tensor:
        a, b = F.avg_pool2d(x, 2, 1, 0, False, True).chunk(2, 1)
        return torch.cat((self.cv1(a), self.cv2(F.max_pool2d(b, 3, 2, 1))), 1)


class SPPELAN(nn.Module):
    """Spatial pyramid pooling: three chained 5x5 max-pools, concatenated and fused."""

    def __init__(self, c_in: int, c_out: int, c_mid: int) -> None:
        super().__init__()
        self.cv1 = Conv(c_in, c_mid, 1)
        # cv2..cv4 hold no weights; the names keep upstream's module numbering.
        self.cv2 = nn.MaxPool2d(5, 1, 2)
        self.cv3 = nn.MaxPool2d(5, 1, 2)
        self.cv4 = nn.MaxPool2d(5, 1, 2)
        self.cv5 = Conv(4 * c_mid, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        parts = [self.cv1(x)]
        for pool in (self.cv2, self.cv3, self.cv4):
            parts.append(pool(parts[-1]))
        return self.cv5(torch.cat(parts, 1))
