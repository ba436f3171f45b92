"""Fixtures shared by several unit-test modules."""

from tests.unit.minirun import run  # noqa: F401  (the mini-run copy, a fixture)
