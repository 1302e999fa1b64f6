"""RT-DETRv2: RT-DETR's backbone and encoder with the v2 decoder (per-level sampling points, fixed-size buffers)."""
