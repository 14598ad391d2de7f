"""Stubs generated from proto/cairn/v1/*.proto by scripts/generate_stubs.py."""
