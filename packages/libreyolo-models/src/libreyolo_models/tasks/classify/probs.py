"""Classification results of one image: the class probabilities and their best classes."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

TOP_K = 5


class Probs:
    """Class probabilities of one image, with the names users read them by.

    ``data`` is ``float [nc]`` (softmax, sums to 1). ``top5`` lists the ``min(5, nc)`` best class
    ids, best first; equal probabilities rank the lower class id first, as validation counts them.
    """

    def __init__(self, data: Tensor, names: dict[int, str]) -> None:
        self.data = data
        self.names = names

    @property
    def _order(self) -> Tensor:
        return torch.sort(self.data.float(), descending=True, stable=True).indices

    @property
    def top1(self) -> int:
        return int(self._order[0])

    @property
    def top5(self) -> list[int]:
        return [int(i) for i in self._order[:TOP_K]]

    @property
    def top1conf(self) -> Tensor:
        return self.data[self.top1]

    @property
    def top5conf(self) -> Tensor:
        return self.data[self._order[:TOP_K]]

    def cpu(self) -> Probs:
        return Probs(self.data.cpu(), self.names)

    def numpy(self) -> np.ndarray:
        return self.data.cpu().numpy()

    def name(self, cls: int) -> str:
        return self.names.get(int(cls), str(int(cls)))

    def summary(self, k: int = TOP_K) -> str:
        """``"circle 0.93, square 0.04, ..."``: the best ``k`` classes."""
        return ", ".join(f"{self.name(i)} {float(self.data[i]):.2f}" for i in self.top5[:k])

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __repr__(self) -> str:
        return f"Probs(top1={self.name(self.top1)!r} {float(self.top1conf):.3f}, nc={len(self)})"
