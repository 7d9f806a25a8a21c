"""The cluster tier (see conftest.py)."""
