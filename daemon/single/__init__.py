"""single: see the modules' docstrings."""
