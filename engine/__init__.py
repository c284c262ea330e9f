"""Market data and analytics: bars, windows, feeds, indicators, signals and charts.

The engine knows nothing of alerts, brokers or MCP (design.md §1); it publishes events and
answers queries that those packages consume.
"""
