"""binance: see the modules' docstrings."""
