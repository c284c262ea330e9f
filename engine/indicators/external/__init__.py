"""external indicators."""
