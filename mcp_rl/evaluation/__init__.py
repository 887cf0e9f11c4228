"""Checkpoint evaluations an agent starts (rl_evaluate): a base model and trained checkpoints on
the same held-out items, in a worker process that drives the trainer's backends (worker), their
planning and cost (checkpoint_eval, checkpoint_models, item_stats), and serving a checkpoint
(serving). The held-out items, outcomes and statistics they use are the proof package's."""
