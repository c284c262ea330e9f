"""orders: see the modules' docstrings."""
