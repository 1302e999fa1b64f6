"""Query selection: the encoder's best-scoring tokens become the decoder's queries.

Every DETR family here scores each encoder token (its best class logit) and keeps the top
``num_queries``. The count is a free choice of the run, not of the weights (training on a CPU
uses fewer; DEIMv2's smallest sizes use 100), but it cannot exceed the tokens an input has.
"""

from __future__ import annotations

from torch import Tensor

from ...errors import ConfigError


def topk_tokens(logits: Tensor, num_queries: int, shapes: list[tuple[int, int]], strides: tuple[int, ...]) -> Tensor:
    """``int64 [B, num_queries]``: the tokens of ``logits [B, S, C]`` with the best class score, best first.

    Raises:
        ConfigError: the input has fewer tokens than queries (an image too small), naming the
            smallest input size that has enough.
    """
    tokens = logits.shape[1]
    if tokens < num_queries:
        need = next(side for side in range(32, 4096, 32)
                    if sum((side // s) ** 2 for s in strides) >= num_queries)
        side = shapes[0][0] * strides[0]
        raise ConfigError(f"the decoder selects {num_queries} queries from the encoder's tokens, but an input of "
                          f"about {side} px gives only {tokens}; use imgsz >= {need} (or fewer queries)")
    return logits.max(-1).values.topk(num_queries, dim=1).indices


def gather_tokens(x: Tensor, index: Tensor) -> Tensor:
    """Rows ``index [B, K]`` of ``x [B, S, D]`` -> ``[B, K, D]``."""
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))
