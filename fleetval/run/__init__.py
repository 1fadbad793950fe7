"""Execution: plan -> placement group -> rank actors -> steps -> rows, with deadlines and culprits.

The only stage that imports ray (and, in the rank actor, torch)."""
