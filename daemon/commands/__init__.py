"""commands: see the modules' docstrings."""
