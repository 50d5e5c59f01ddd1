"""CPU samplers."""
