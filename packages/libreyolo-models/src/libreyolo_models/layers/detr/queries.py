"""Query selection: the encoder's best-scoring tokens become the decoder's queries.

Every DETR family here scores each encoder token (its best class logit) and keeps the top
``num_queries``. The count is a free choice of the run, not of the weights (training on a CPU
uses fewer; DEIMv2's smallest sizes use 100), but it cannot exceed the tokens an input has.
"""

from __future__ import annotations

import logging

from torch import Tensor

from ...errors import ConfigError

log = logging.getLogger(__name__)


def topk_tokens(logits: Tensor, num_queries: int, shapes: list[tuple[int, int]], strides: tuple[int, ...], *,
                clamp: bool = False, logged: set[tuple[int, int]] | None = None) -> Tensor:
    """``int64 [B, Q]``: the tokens of ``logits [B, S, C]`` with the best class score, best first;
    ``Q = num_queries``, or with ``clamp`` at most the ``S`` tokens an input has (logged once per
    query and token count in ``logged``, the caller's record: a small image then yields fewer
    queries, and fewer detections at most).

    Raises:
        ConfigError: without ``clamp``, the input has fewer tokens than queries (an image too
            small), naming the smallest input size that has enough.
    """
    tokens = logits.shape[1]
    if clamp and tokens < num_queries:
        if logged is None or (num_queries, tokens) not in logged:
            if logged is not None:
                logged.add((num_queries, tokens))
            log.warning("an input of about %d px has %d encoder tokens, fewer than the %d queries the decoder "
                        "selects: it selects all %d (a larger imgsz, or num_queries <= %d, avoids this)",
                        shapes[0][0] * strides[0], tokens, num_queries, tokens, tokens)
        num_queries = tokens
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
