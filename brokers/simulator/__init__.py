"""A Binance-compatible spot exchange on loopback, for tests, benchmarks and the offline demo.

It speaks Binance's documented REST and market-stream protocols (design.md §4) so that our
own clients, python-binance and ccxt can all talk to it, and it adds a control API
(``/sim/v1/...``) to move prices and the clock and to inject faults.  It imports nothing
from the rest of chartgen: it is an independent fake exchange.
"""

from brokers.simulator.app import RunningSimulator, start_simulator

__all__ = ["RunningSimulator", "start_simulator"]
