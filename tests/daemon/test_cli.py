"""The chartgen CLI: one-shot render against a Binance-compatible endpoint, and its failures."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytestmark = pytest.mark.process


async def _run(*args: str, env_extra: dict[str, str] | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_")}
    env.update(env_extra or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_one_shot_render_writes_the_chart_from_the_rest_endpoint(sim: Any, tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    code, stdout, stderr = await _run(
        "-s", "BTCUSDT", "-i", "1h", "-p", "rsi", "-o", str(out), env_extra={"CHARTGEN_BINANCE_REST_URL": sim.url}
    )
    assert code == 0, stderr
    assert stdout.strip() == f"Done: {out}"
    with Image.open(out) as img:
        assert img.size == (1920, 1080)


async def test_one_shot_render_with_the_endpoint_down_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    code, _, stderr = await _run(
        "-s",
        "BTCUSDT",
        "-i",
        "1h",
        "-p",
        "rsi",
        "-o",
        str(out),
        env_extra={"CHARTGEN_BINANCE_REST_URL": "http://127.0.0.1:9"},
    )
    assert code != 0
    lines = [ln for ln in stderr.splitlines() if ln.startswith("chartgen: error:")]
    assert len(lines) == 1 and "Failed to fetch data" in lines[0]
    assert not out.exists()


async def test_unknown_indicator_on_the_command_line_is_refused(tmp_path: Path) -> None:
    code, _, stderr = await _run("-p", "nope", "-o", str(tmp_path / "y.png"))
    assert code != 0
    assert "Unknown indicator(s): nope" in stderr


async def test_serve_refuses_a_public_address_until_authentication_exists() -> None:
    code, _, stderr = await _run("--serve", "--host", "0.0.0.0", "--port", "0")
    assert code != 0
    assert "refusing to listen on 0.0.0.0" in stderr
