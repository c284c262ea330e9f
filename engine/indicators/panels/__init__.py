"""panels indicators."""
