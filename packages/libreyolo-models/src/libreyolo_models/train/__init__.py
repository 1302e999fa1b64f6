"""Training: a coordinator (``trainer.py``) over small collaborators (optimizer, schedule, EMA,
checkpoints, results log, callbacks), with DDP and CUDA graphs each plugged in at one call site."""
