"""Every key and shape of Meta's SAM checkpoints (``sam_vit_{b,l,h}_*.pth``), written from the
official ``build_sam.py``, ``image_encoder.py``, ``prompt_encoder.py``, ``mask_decoder.py`` and
``transformer.py`` (module registration order; a module's own parameters before its children's).
Kept apart from the network code on purpose: the layout test compares the two."""

from __future__ import annotations

# build_sam.py: (embed_dim, depth, num_heads, global_attn_indexes) per size
OFFICIAL = {"b": (768, 12, 12, (2, 5, 8, 11)), "l": (1024, 24, 16, (5, 11, 17, 23)),
            "h": (1280, 32, 16, (7, 15, 23, 31))}

Layout = list[tuple[str, tuple[int, ...]]]


def _lin(name: str, o: int, i: int) -> Layout:
    return [(f"{name}.weight", (o, i)), (f"{name}.bias", (o,))]


def _norm(name: str, c: int) -> Layout:
    return [(f"{name}.weight", (c,)), (f"{name}.bias", (c,))]


def _attn(name: str, inner: int) -> Layout:
    return (_lin(f"{name}.q_proj", inner, 256) + _lin(f"{name}.k_proj", inner, 256) + _lin(f"{name}.v_proj", inner, 256)
            + _lin(f"{name}.out_proj", 256, inner))


def official_layout(size: str) -> Layout:
    width, depth, heads, global_blocks = OFFICIAL[size]
    head_dim = width // heads
    e = "image_encoder"
    keys: Layout = [(f"{e}.pos_embed", (1, 64, 64, width)), (f"{e}.patch_embed.proj.weight", (width, 3, 16, 16)),
                    (f"{e}.patch_embed.proj.bias", (width,))]
    for i in range(depth):
        b, side = f"{e}.blocks.{i}", 64 if i in global_blocks else 14
        keys += _norm(f"{b}.norm1", width)
        keys += [(f"{b}.attn.rel_pos_h", (2 * side - 1, head_dim)), (f"{b}.attn.rel_pos_w", (2 * side - 1, head_dim))]
        keys += _lin(f"{b}.attn.qkv", 3 * width, width) + _lin(f"{b}.attn.proj", width, width)
        keys += _norm(f"{b}.norm2", width) + _lin(f"{b}.mlp.lin1", 4 * width, width) + _lin(f"{b}.mlp.lin2", width, 4 * width)
    keys += [(f"{e}.neck.0.weight", (256, width, 1, 1))] + _norm(f"{e}.neck.1", 256)
    keys += [(f"{e}.neck.2.weight", (256, 256, 3, 3))] + _norm(f"{e}.neck.3", 256)
    p = "prompt_encoder"
    keys += [(f"{p}.pe_layer.positional_encoding_gaussian_matrix", (2, 128))]
    keys += [(f"{p}.point_embeddings.{i}.weight", (1, 256)) for i in range(4)]
    keys += [(f"{p}.not_a_point_embed.weight", (1, 256))]
    m = f"{p}.mask_downscaling"
    keys += [(f"{m}.0.weight", (4, 1, 2, 2)), (f"{m}.0.bias", (4,))] + _norm(f"{m}.1", 4)
    keys += [(f"{m}.3.weight", (16, 4, 2, 2)), (f"{m}.3.bias", (16,))] + _norm(f"{m}.4", 16)
    keys += [(f"{m}.6.weight", (256, 16, 1, 1)), (f"{m}.6.bias", (256,)), (f"{p}.no_mask_embed.weight", (1, 256))]
    d = "mask_decoder"
    for i in range(2):
        t = f"{d}.transformer.layers.{i}"
        keys += _attn(f"{t}.self_attn", 256) + _norm(f"{t}.norm1", 256)
        keys += _attn(f"{t}.cross_attn_token_to_image", 128) + _norm(f"{t}.norm2", 256)
        keys += _lin(f"{t}.mlp.lin1", 2048, 256) + _lin(f"{t}.mlp.lin2", 256, 2048)
        keys += _norm(f"{t}.norm3", 256) + _norm(f"{t}.norm4", 256) + _attn(f"{t}.cross_attn_image_to_token", 128)
    keys += _attn(f"{d}.transformer.final_attn_token_to_image", 128) + _norm(f"{d}.transformer.norm_final_attn", 256)
    keys += [(f"{d}.iou_token.weight", (1, 256)), (f"{d}.mask_tokens.weight", (4, 256))]
    u = f"{d}.output_upscaling"
    keys += [(f"{u}.0.weight", (256, 64, 2, 2)), (f"{u}.0.bias", (64,))] + _norm(f"{u}.1", 64)
    keys += [(f"{u}.3.weight", (64, 32, 2, 2)), (f"{u}.3.bias", (32,))]
    for i in range(4):
        h = f"{d}.output_hypernetworks_mlps.{i}.layers"
        keys += _lin(f"{h}.0", 256, 256) + _lin(f"{h}.1", 256, 256) + _lin(f"{h}.2", 32, 256)
    h = f"{d}.iou_prediction_head.layers"
    keys += _lin(f"{h}.0", 256, 256) + _lin(f"{h}.1", 256, 256) + _lin(f"{h}.2", 4, 256)
    return keys


if __name__ == "__main__":  # writes the vit-b manifest the test also reads
    import sys

    for key, shape in official_layout(sys.argv[1] if len(sys.argv) > 1 else "b"):
        print(f"{key}\t{'x'.join(map(str, shape))}")
