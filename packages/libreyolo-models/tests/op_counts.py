"""Counting the aten operations a piece of code dispatches (a launch-bound step's cost is its
count): ``with OpCounter() as ops: ...`` then ``ops.seen["aten.silu_"]``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
