"""leader: see the modules' docstrings."""
