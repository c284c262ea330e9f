"""Benchmarks (not tests): ``make bench`` prints a table and writes bench/results/latest.json."""

from daemon import configure_logging

# In-process daemons of the benchmarks log as a production daemon would at level warning;
# unconfigured, structlog would print every debug event to the terminal inside the timings.
configure_logging("warning")
