"""RT-DETR: a real-time detection transformer (ResNet-vd or HGNetv2 backbone, hybrid encoder, deformable decoder)."""
