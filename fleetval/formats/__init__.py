"""Parsers of what GPU fleets already produce: NCCL/RCCL logs, smi outputs, nccl-tests results."""
