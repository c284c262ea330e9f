"""``chartgen trading halt [--cancel-open] [--reason TEXT] | resume | status``: the operator's halt switch.

Works on the data dir's database while the daemon runs (SQLite WAL), like ``chartgen token``:
the flag applies to the very next order of every path, because order admission reads it in
its own transaction (:mod:`brokers.halt`).  ``--cancel-open`` also asks the running daemon to
cancel every open order and order list; it notices within a fraction of a second
(:mod:`brokers.halt_switch`), and this command waits up to ``--wait`` seconds for its result and
prints it.  With no trading daemon running the flag is set anyway and the cancelling happens
when the daemon next starts.  HALT and RESUME lines go to trades.log.  The command acts as the
operator (:mod:`brokers.halt_authority`): its halt holds against every token but an admin one,
its cancel-open cancels every principal's orders, and its resume lifts any halt; ``status``
names the holder and who may lift the halt.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from brokers import HaltAuthority, HaltState, HaltStore, summary
from config import load_settings
from daemon.commands import suspend as suspend_command
from daemon.database import TRADES_LOG_FILE, open_database
from daemon.logging import configure_logging
from daemon.parts.halt import daemon_running
from daemon.trades_log import TradesLog
from storage import DatabaseError

WAIT_S = 5.0
POLL_S = 0.05


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chartgen trading", description="Halt or resume all trading (every order path refuses while halted)."
    )
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    sub = p.add_subparsers(dest="action", required=True)
    halt = sub.add_parser("halt", help="refuse every new order until resumed")
    halt.add_argument("--reason", help="why (shown in /status, STATUS= and to clients whose orders are refused)")
    halt.add_argument(
        "--cancel-open", action="store_true", help="also cancel every open order and order list on the exchange"
    )
    halt.add_argument(
        "--wait",
        type=float,
        default=WAIT_S,
        help=f"seconds to wait for the daemon's cancel result (default {WAIT_S:g})",
    )
    sub.add_parser("resume", help="accept orders again")
    sub.add_parser("status", help="show whether trading is halted")
    suspend_command.add_parsers(sub.add_parser)  # suspend / unsuspend one principal (daemon/commands/suspend.py)
    return p


def _who() -> HaltAuthority:
    """The operator at this terminal, as ``cli:<user>``."""
    try:
        return HaltAuthority.operator("cli", getpass.getuser())
    except (KeyError, OSError):
        return HaltAuthority.operator("cli")


def _describe(state: HaltState) -> str:
    holder = state.holder
    if holder is None:
        return "trading is running (not halted)"
    public = state.public()
    return (
        f"trading is HALTED since {public['since']} by {holder.describe()}: {state.reason or 'no reason given'}"
        f"\nheld by {holder.name} ({holder.kind}): {holder.lifted_by()}"
    )


async def _wait_for_cancel(store: HaltStore, seq: int, wait_s: float) -> HaltState | None:
    """Poll the row (another process answers; SQLite has no cross-process notification) until the
    daemon records request ``seq`` done, or ``wait_s`` passes."""
    deadline = time.monotonic() + wait_s
    while True:
        state = await store.read()
        if state.cancel_done_seq >= seq:
            return state
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(POLL_S)


async def _halt(ns: argparse.Namespace, store: HaltStore, trades: TradesLog, db_path: Path) -> int:
    by = _who()
    state = await store.halt(reason=ns.reason, by=by, now=time.time(), cancel_open=ns.cancel_open)
    await trades.append([f"{_stamp()} HALT by {by.name}: {ns.reason or 'no reason given'}"])
    print(_describe(state))
    if not ns.cancel_open:
        return 0
    if not daemon_running(db_path):
        print(
            "no trading daemon is running on this data dir: the halt is set anyway, and open orders and order "
            "lists will be cancelled when the daemon next starts with --trade"
        )
        return 0
    done = await _wait_for_cancel(store, state.cancel_seq, ns.wait)
    if done is None:
        print(
            f"the daemon did not report the cancel result within {ns.wait:g} s; the halt is set and the request "
            "stays pending (see GET /status, or run `chartgen trading status`)",
            file=sys.stderr,
        )
        return 1
    result = done.cancel_result or {}
    print(f"{summary(result)} in {result.get('seconds', 0):g} s")
    return 1 if result.get("failures") else 0


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def _run(ns: argparse.Namespace) -> int:
    settings = load_settings({"data_dir": ns.data_dir}, ns.config)
    configure_logging("warning", settings.log_format)
    trades = TradesLog(settings.resolved_data_dir() / TRADES_LOG_FILE)
    async with open_database(settings) as db:
        assert db.path is not None
        store = HaltStore(db)
        if ns.action == "halt":
            return await _halt(ns, store, trades, db.path)
        if ns.action == "resume":
            by = _who()
            state = await store.resume(by=by)  # the operator lifts any halt
            await trades.append([f"{_stamp()} RESUME by {by.name}"])
            print(_describe(state))
            return 0
        state = await store.read()
        print(_describe(state))
        if state.cancel_pending:
            print("a cancel-open request is pending (carried out when the trading daemon runs)")
        if state.cancel_result is not None:
            print(f"last cancel-open: {summary(state.cancel_result)}")
        return 0


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    if ns.action in suspend_command.ACTIONS:
        return suspend_command.main(ns)
    if ns.action == "halt" and not 0 <= ns.wait <= 600:
        print("chartgen trading: error: --wait must be between 0 and 600 seconds", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(ns))
    except DatabaseError as exc:
        print(f"chartgen trading: error: {exc}", file=sys.stderr)
        return 1
