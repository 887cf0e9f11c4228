"""A run's metrics: the local record (store), W&B as a second source, the plot, and the
results an agent judges a run by. Nothing here imports matplotlib or wandb at import time."""
