"""parts: see the modules' docstrings."""
