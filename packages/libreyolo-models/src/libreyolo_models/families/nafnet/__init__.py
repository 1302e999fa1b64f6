"""NAFNet (Chen et al., 2022): a nonlinear-activation-free U-Net for image restoration (denoise, deblur)."""
