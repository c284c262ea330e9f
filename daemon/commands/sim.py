"""``chartgen sim-exchange``: the Binance-compatible simulator as its own process.

The first line of stdout is the base URL (``http://127.0.0.1:PORT``), so scripts can start
it with ``--port 0`` and read where it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, DEFAULT_SYMBOLS, start_simulator


def _balances(text: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        asset, sep, amount = part.partition("=")
        try:
            value = Decimal(amount)
        except InvalidOperation:
            value = Decimal(-1)
        if not sep or not asset.strip() or value < 0:
            raise argparse.ArgumentTypeError(f"expected ASSET=AMOUNT pairs like USDT=10000,BTC=0, got {part!r}")
        out[asset.strip().upper()] = value
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chartgen sim-exchange", description="Binance-compatible exchange simulator")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    p.add_argument("--seed", type=int, default=42, help="seed of the deterministic prices (default 42)")
    p.add_argument("--symbols", default=",".join(DEFAULT_SYMBOLS), help="comma-separated symbols")
    p.add_argument("--clock", choices=("manual", "real"), default="real", help="manual: time moves via /sim/v1/advance")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second (real clock)")
    p.add_argument("--api-key", default=DEFAULT_API_KEY, help=f"the account's API key (default {DEFAULT_API_KEY})")
    p.add_argument("--api-secret", default=DEFAULT_API_SECRET, help="the account's API secret")
    p.add_argument("--balances", type=_balances, default=None, help="starting balances, e.g. USDT=10000,BTC=0")
    p.add_argument(
        "--weight-limit", type=int, default=6000, help="REQUEST_WEIGHT per rolling minute before 429 (default 6000)"
    )
    return p


async def _run(ns: argparse.Namespace) -> None:
    symbols = [s.strip().upper() for s in ns.symbols.split(",") if s.strip()]
    sim = await start_simulator(
        ns.host,
        ns.port,
        seed=ns.seed,
        symbols=symbols,
        clock=ns.clock,
        speed=ns.speed,
        api_key=ns.api_key,
        api_secret=ns.api_secret,
        balances=ns.balances,
        weight_limit=ns.weight_limit,
    )
    print(sim.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await sim.close()


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    if ns.speed <= 0:
        print("chartgen sim-exchange: error: --speed must be > 0", file=sys.stderr)
        return 2
    if ns.weight_limit < 10:
        print("chartgen sim-exchange: error: --weight-limit must be at least 10", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(ns))
    except OSError as exc:
        print(f"chartgen sim-exchange: error: cannot listen on {ns.host}:{ns.port}: {exc}", file=sys.stderr)
        return 1
    return 0
