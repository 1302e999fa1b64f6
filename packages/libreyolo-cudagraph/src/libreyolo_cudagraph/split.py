"""Split capture: graph a computation up to a declared seam, run the rest eagerly.

Some work can never sit inside a graph: NMS, boolean-mask selection, anything with
``.item()`` or a data-dependent shape. Rather than change eager numerics to make them
capturable, the computation is cut at a seam. The head (static shapes, pure tensor work) is
replayed; the tail runs eagerly on the replayed tensors. Both paths call the same ``tail_fn``,
so the combined result equals all-eager bit for bit whenever the head's replay does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from .eligibility import GraphMode, name_of
from .info import GraphInfo, RunnerInfo
from .runner import GraphRunner


class SplitGraphRunner:
    """``runner(*x) == tail_fn(head_fn(*x))``, with only ``head_fn`` graphed.

    ``tail_fn`` receives the head's output as one argument (a tensor or the nested structure
    ``head_fn`` returns). With the default ``copy_outputs=True`` the tail gets owned tensors;
    with ``copy_outputs=False`` it reads the graph's static buffers directly (saves a copy),
    which is safe only if the tail does not return views of them.

    Args:
        head_fn: tensor-only prefix of the computation (the part to graph).
        tail_fn: the eager remainder.
        **runner_kwargs: passed to :class:`GraphRunner` for the head (``mode``, ``max_graphs``,
            ``evict``, ``copy_outputs``, ``watch``, ``warmup_iters``, ``name``).
    """

    def __init__(
        self, head_fn: Callable[..., Any], tail_fn: Callable[[Any], Any], **runner_kwargs: Any
    ) -> None:
        runner_kwargs.setdefault("name", f"{name_of(head_fn)}|{name_of(tail_fn)}")
        self.head = GraphRunner(head_fn, **runner_kwargs)
        self.tail_fn = tail_fn

    def __call__(self, *inputs: Tensor) -> Any:
        """Replay (or run) the head, then run the tail eagerly on its output."""
        return self.tail_fn(self.head(*inputs))

    @property
    def mode(self) -> GraphMode:
        """The head runner's mode; assignable."""
        return self.head.mode

    @mode.setter
    def mode(self, value: GraphMode) -> None:
        self.head.mode = value

    @property
    def watch(self) -> nn.Module | None:
        """The module whose storage the head runner fingerprints."""
        return self.head.watch

    def capture(self, *example_inputs: Tensor) -> GraphInfo:
        """Capture the head for ``example_inputs`` now (see :meth:`GraphRunner.capture`)."""
        return self.head.capture(*example_inputs)

    def info(self) -> RunnerInfo:
        """The head runner's info."""
        return self.head.info()

    def invalidate(self, reason: str) -> None:
        """Drop the head's graphs (see :meth:`GraphRunner.invalidate`)."""
        self.head.invalidate(reason)

    def release(self) -> None:
        """Free the head's graphs and memory (see :meth:`GraphRunner.release`)."""
        self.head.release()
