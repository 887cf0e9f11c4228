"""Smoke tests of an environment against real models (rl_test_inference).

`service` starts a test and reads it; `runner` is the detached worker program; `report` turns
the JSONL Atropos writes into scores; `models` holds the file formats.
"""
