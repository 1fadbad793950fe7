"""fleetval: validate GPU fleets with real torch.distributed collectives on Ray."""

__version__ = "0.1.0"
