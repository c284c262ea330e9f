"""A Binance-compatible spot exchange on loopback, for tests, benchmarks and the offline demo.

It speaks Binance's documented REST and market-stream protocols (design.md §4) so that our
own clients, python-binance and ccxt can all talk to it, and it adds a control API
(``/sim/v1/...``) to move prices and the clock and to inject faults.  It imports one
module of chartgen, Binance's stop / take-profit / trailing trigger rules
(brokers/trigger_rules.py, shared with the paper broker); nothing of chartgen imports it but
the daemon's ``--sim`` wiring and ``chartgen sim-exchange``.
"""

from typing import TYPE_CHECKING

from simulator.app import RunningSimulator, start_simulator

if TYPE_CHECKING:
    from simulator.accounts import FEE
    from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET, DEFAULT_SYMBOLS
    from simulator.exchange_info import symbol_info
    from simulator.faults import RESTRICTED_LOCATION_MSG, HttpErrorFault, OrderFault
    from simulator.market import INTERVAL_MS, open_time_of

_HOMES = {
    "DEFAULT_API_KEY": "simulator.exchange",
    "DEFAULT_API_SECRET": "simulator.exchange",
    "DEFAULT_SYMBOLS": "simulator.exchange",
    "FEE": "simulator.accounts",
    "HttpErrorFault": "simulator.faults",
    "INTERVAL_MS": "simulator.market",
    "OrderFault": "simulator.faults",
    "RESTRICTED_LOCATION_MSG": "simulator.faults",
    "open_time_of": "simulator.market",
    "symbol_info": "simulator.exchange_info",
}
"""Where each public name lives: imported on first use (PEP 562), so importing the package stays cheap."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_API_SECRET",
    "DEFAULT_SYMBOLS",
    "FEE",
    "INTERVAL_MS",
    "RESTRICTED_LOCATION_MSG",
    "HttpErrorFault",
    "OrderFault",
    "RunningSimulator",
    "open_time_of",
    "start_simulator",
    "symbol_info",
]
