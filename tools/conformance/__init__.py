"""Conformance runner of swordfish: CPython's asyncio test suite run on the
swordfish loop and on the stdlib loop.  Entry point: tools/conformance.py."""
