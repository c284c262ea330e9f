"""daemon package."""
