"""worker: see the modules' docstrings."""
