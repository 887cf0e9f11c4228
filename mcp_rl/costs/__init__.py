"""What paid work costs: rates (configs/pricing.yaml and OpenRouter's /models), estimates before
a start, per-step token counts and costs during a run, the run's cost cap, and the yes asked
before paid work. Everything derived here is an estimate and is labelled so.

Modules: rates (Tinker's rate table), meter (token counters), estimate (a run's range),
training (a run file's estimate), tracker (per-step costs and the cap, in the trainer),
openrouter (OpenRouter's prices and per-request costs), consent (the yes before paid work).
"""
