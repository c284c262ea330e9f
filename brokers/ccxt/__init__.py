"""ccxt: see the modules' docstrings."""
