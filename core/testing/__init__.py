"""Test support shipped with the core: the target conformance suite as a pytest plugin."""
