"""Neural-network layers (placeholder)."""
