"""front: see the modules' docstrings."""
