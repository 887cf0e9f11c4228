"""Did it learn? The proof of a run against its base: the held-out items (heldout), each model's
per-item outcomes (outcomes), an environment's own evaluate() read as outcomes (env_eval), the
paired statistics (stats), the trivial baselines and the verdict (verdict), and the summary and
note an agent reads (summary, held_out_note).

Below the trainer (which evaluates during a run), the checkpoint evaluations (evaluation/) and
the run answers (supervisor/, metrics/): it imports none of them."""
