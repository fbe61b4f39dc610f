"""A stand-in for the `alfworld` package, for tests only (see tests/alfworld/conftest.py)."""
