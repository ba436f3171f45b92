"""Measurement: collectors -> raw append-only records -> typed tables -> plots."""
