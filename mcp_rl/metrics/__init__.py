"""A run's metrics: the local record (store), W&B as a second source (wandb_reader), the plot,
and the learning signal (signal). Readers of the run registry that assemble the results an agent
judges a run by live beside the registry (supervisor/results.py). Nothing here imports
matplotlib or wandb at import time."""
