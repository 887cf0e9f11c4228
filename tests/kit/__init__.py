"""The test kit (issues 38, 46): what a test reaches for before writing its own helper. Support
shared by more than one test folder lives here or, for a paid service's wire, in tests/fakes;
pytest fixtures live in the conftest files (tests/test_kit.py holds that true).

- `wait`: poll a condition with a deadline (the only wait helper; never a fixed sleep), and
  `listening`, its probe of a port.
- `loopback`: the one way a wire fake (Tinker, Hub, W&B, OpenRouter, ...) listens on 127.0.0.1.
- `runs`: the one run builder: a run's RunConfig (synthetic, stand-in or a real arithmetic run),
  its registry row, a synthetic finished run folder, a run with real saved checkpoints.
- `run_harness`: a run's three processes started by hand (`LocalRun`) and watched.
- `tinker_wire`: the loopback Tinker through the real SDK, and a Trainer run on it with run-api.
- `mcp`: calling tools through a real MCP client (`ok`, `run_to_end`), and a family's interpreter.
- `shared_run`: the one short completed run the end-to-end tests that only read it share.
- `smoke_tests`: reading a smoke test's resource until it ends.
- `stranger`: a process that is not ours (a stop must never signal it).
- `footprint`: the bytes a run leaves in the state folder.
- `service`: a long-lived service a fixture starts (a Ray head, SkyRL's Tinker API).
- `mcp_tasks`: MCP tasks requests.

Kept apart from the test modules so that no test imports another test module's private helpers.
"""
