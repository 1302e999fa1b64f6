"""The encoder-decoder detection kit shared by the DETR families (RT-DETR, RT-DETRv2, D-FINE, DEIM,
RT-DETRv4, DEIMv2): backbones, hybrid encoders, deformable attention, decoders, denoising groups,
Hungarian matching and the set losses. Module and attribute names are upstream's checkpoint keys."""
