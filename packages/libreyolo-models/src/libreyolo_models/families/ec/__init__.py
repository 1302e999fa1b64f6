"""EC (EdgeCrafter): a ViT with RoPE and a register token, a hybrid encoder and a D-FINE-style decoder."""
