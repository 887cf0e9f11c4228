"""The test kit (issue 38): what a test reaches for before writing its own helper.

- `wait`: poll a condition with a deadline (the only wait helper; never a fixed sleep), and
  `listening`, its probe of a port.
- `loopback`: the one way a wire fake (Tinker, Hub, W&B, OpenRouter, ...) listens on 127.0.0.1.
- `runs`: build a run folder's RunConfig (synthetic, stand-in or a real arithmetic run).
- `tinker_wire`: the loopback Tinker through the real SDK, and a Trainer run on it with run-api.

Kept apart from the test modules so that no test imports another test module's private helpers.
"""
