"""overlays indicators."""
