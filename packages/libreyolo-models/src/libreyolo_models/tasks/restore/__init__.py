"""Image restoration (``restore``): degraded pictures in, clean pictures out; PSNR and SSIM."""
