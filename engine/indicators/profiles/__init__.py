"""profiles indicators."""
