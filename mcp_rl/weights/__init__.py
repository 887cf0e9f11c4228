"""A run's trained weights in the user's hands: its checkpoints (list, keep, TTL, delete), export
as a PEFT adapter or a merged Hugging Face model, Tinker downloads and pushes to the Hub.

Import-light: torch, transformers, peft, tinker and huggingface_hub are imported inside the
functions that need them (the export worker process, a Tinker call).
"""
