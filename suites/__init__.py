"""Shipped suites (YAML), installed as package data of `fleetval.suites`."""
