"""Helpers the test modules share (imported as `tests.helpers.<module>`; synthetic stores and fleets are `fleetval.testing`)."""
