"""paper: see the modules' docstrings."""
