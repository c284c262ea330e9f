"""Run every benchmark, print a table with the targets, write bench/results/latest.json."""

from __future__ import annotations

import asyncio
import json
import os
import platform
from pathlib import Path
from typing import Any

from bench.agent_market import print_table as print_agent_market_table
from bench.agent_market import run as run_agent_market
from bench.agent_simulate import print_table as print_agent_simulate_table
from bench.agent_simulate import run as run_agent_simulate
from bench.alert_actions import print_table as print_action_table
from bench.alert_actions import run as run_action_benches
from bench.alerts import print_table as print_alert_table
from bench.alerts import run as run_alert_benches
from bench.charts import bench_ping_while_rendering, bench_tool_latency
from bench.dashboard import print_table as print_dashboard_table
from bench.dashboard import run as run_dashboard
from bench.engine import bench_memory, print_scale, run_scale
from bench.engine import run_all as run_engine_benches
from bench.http_tools import print_table as print_http_table
from bench.http_tools import run as run_http_benches
from bench.indicators import bench_all_indicators, bench_engine_set, bench_per_closed_bar, print_per_closed_bar
from bench.orders import print_table as print_order_table
from bench.orders import run as run_order_benches
from bench.outbox import print_table as print_outbox_table
from bench.outbox import run as run_outbox
from bench.render_flood import print_table as print_render_flood_table
from bench.render_flood import run as run_render_flood
from bench.set_alert_http import print_table as print_set_alert_table
from bench.set_alert_http import run as run_set_alert_benches
from bench.sim_advance import bench_advance
from bench.sim_klines import bench_klines
from bench.sqlite_durability import print_table as print_durability_table
from bench.sqlite_durability import run as run_durability_bench
from bench.unattended_load import print_table as print_unattended_table
from bench.unattended_load import run as run_unattended_benches

RESULTS = Path(__file__).parent / "results"


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main() -> None:
    results: dict[str, Any] = {"machine": machine()}
    results["indicators_5000_ms"] = bench_all_indicators(5000)
    results["engine_set_1000"] = bench_engine_set(1000)
    results["per_closed_bar"] = bench_per_closed_bar()
    results["engine_scale"] = run_scale()
    results.update(asyncio.run(bench_tool_latency()))
    results.update(asyncio.run(bench_ping_while_rendering()))
    results.update(asyncio.run(run_engine_benches()))
    results["engine_rss_1000x2x1000_mb"] = bench_memory()
    results["alerts"] = run_alert_benches()
    results["orders"] = run_order_benches()
    results["http_tools"] = run_http_benches()
    results["render_flood"] = run_render_flood()
    results["set_alert_http"] = run_set_alert_benches()
    results["sqlite_durability"] = run_durability_bench()
    results["alert_actions"] = run_action_benches()
    results["unattended_load"] = run_unattended_benches()
    results["agent_market"] = asyncio.run(run_agent_market())
    results["agent_simulate"] = asyncio.run(run_agent_simulate())
    results["outbox"] = asyncio.run(run_outbox())
    results["dashboard"] = asyncio.run(run_dashboard())
    results["sim_klines"] = asyncio.run(bench_klines(1000, 1000, 32, "1m"))
    results["sim_advance"] = asyncio.run(bench_advance(1000, "1m", 4, 60.0, 3))

    rows = [
        ("generate_chart png 1920x1080 200 bars (median)", results["generate_chart_png_ms"]["median"], "ms", 400),
        ("generate_chart summary (median)", results["generate_chart_summary_ms"]["median"], "ms", 20),
        ("ping p99 while 10 charts render", results["ping_while_rendering_ms"]["p99"], "ms", 50),
        ("cipher_b+macd+rsi on 1000 bars", results["engine_set_1000"]["total_ms"], "ms", 2),
        ("closed-bar storm, 1000 symbols (p99)", results["closed_bar_storm"]["p99_s"] * 1000, "ms", 1000),
        ("warm-up 100 symbols x 1000 bars", results["warm_up_100x1000_s"], "s", 5),
        ("RSS 1000 symbols x 2 intervals x 1000 bars", results["engine_rss_1000x2x1000_mb"], "MB", 400),
        ("simulator: 1000 klines requests x 1000 bars", results["sim_klines"]["seconds"], "s", 3),
        ("simulator: 60 s advance, 1000 x 1m, 1st close", results["sim_advance"][0]["first_closed_s"], "s", 0.3),
    ]
    ingest, pb = results["ingest_msgs_per_s"], results["ingest_python_binance_msgs_per_s"]
    print(f"ingest: {ingest:,.0f} kline msgs/s (target ≥ 30,000)")
    print(f"python-binance socket manager, same stream: {pb:,.0f} msgs/s (ours is {ingest / pb:.2f}x)")
    print(f"machine: {results['machine']}")
    print(f"{'benchmark':<50} {'value':>10}  {'target':>8}  ok")
    for name, value, unit, target in rows:
        print(f"{name:<50} {value:>8.2f}{unit}  {'≤' + str(target) + unit:>8}  {'yes' if value <= target else 'NO'}")
    print("\nengine scale:")
    print_per_closed_bar(results["per_closed_bar"])
    print_scale(results["engine_scale"])
    print("\nalerts:")
    print_alert_table(results["alerts"])
    print("\norders:")
    print_order_table(results["orders"])
    print("\nHTTP tool calls:")
    print_http_table(results["http_tools"])
    print("\nrendering while another client floods the render pool:")
    print_render_flood_table(results["render_flood"])
    print("\nset_alert over HTTP, session-less JSON-RPC:")
    print_set_alert_table(results["set_alert_http"])
    print("\nSQLite commit durability (WAL):")
    print_durability_table(results["sqlite_durability"])
    print("\nalert actions (trigger to exchange):")
    print_action_table(results["alert_actions"])
    print("\n100,000 action alerts and 10,000 schedules armed:")
    print_unattended_table(results["unattended_load"])
    print("\nagent tools (in the tool, warm):")
    print_agent_market_table(results["agent_market"])
    print_agent_simulate_table(results["agent_simulate"])
    print("\nnotification channels:")
    print_outbox_table(results["outbox"]["delivery"], results["outbox"]["firing"])
    print("\ndashboard (headless Chromium):")
    print_dashboard_table(results["dashboard"])
    print("\nall 38 indicators on 5000 bars (ms, best of 5):")
    for name, ms in sorted(results["indicators_5000_ms"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<16} {ms:8.3f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    print(f"\nwritten: {RESULTS / 'latest.json'}")


if __name__ == "__main__":
    main()
