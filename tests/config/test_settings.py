"""Settings precedence (CLI > env > TOML > defaults), data-dir resolution and validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config import ConfigFileError, load_settings


def test_defaults_point_at_binance_and_loopback() -> None:
    s = load_settings()
    assert s.binance_rest_url == "https://api.binance.com"
    assert s.host == "127.0.0.1" and s.port == 9315
    assert s.indicators == ["cipher_b", "macd", "rsi"]


def test_cli_beats_env_beats_toml_beats_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('port = 1111\nbinance_rest_url = "http://toml"\nyahoo_url = "http://toml-y"\n')
    monkeypatch.setenv("CHARTGEN_BINANCE_REST_URL", "http://env/")
    monkeypatch.setenv("CHARTGEN_PORT", "2222")
    s = load_settings({"port": 3333}, toml)
    assert s.port == 3333
    assert s.binance_rest_url == "http://env"
    assert s.yahoo_url == "http://toml-y"


def test_data_dir_uses_state_directory_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/state:{tmp_path}/other")
    assert load_settings().resolved_data_dir() == tmp_path / "state"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert load_settings().resolved_data_dir() == Path.home() / ".chartgen"
    assert load_settings({"data_dir": tmp_path / "x"}).resolved_data_dir() == tmp_path / "x"


def test_symbol_lists_accept_commas_and_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARTGEN_SYMBOLS", "btcusdt, ethusdt")
    assert load_settings().symbols == ["BTCUSDT", "ETHUSDT"]
    assert load_settings({"symbols": ["solusdt,btcusdt", "SOLUSDT"]}).symbols == ["SOLUSDT", "BTCUSDT"]


def test_bad_values_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="binance_rest_url"):
        load_settings({"binance_rest_url": "not a url"})
    with pytest.raises(ValidationError, match="port"):
        load_settings({"port": 70000})
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [")
    with pytest.raises(ConfigFileError, match="not valid TOML"):
        load_settings(None, bad)
    with pytest.raises(ConfigFileError, match="does not exist"):
        load_settings(None, tmp_path / "missing.toml")


def test_unknown_toml_key_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("prot = 1\n")
    with pytest.raises(ValidationError, match="prot"):
        load_settings(None, f)


def test_loopback_detection() -> None:
    assert load_settings({"host": "127.0.0.1"}).host_is_loopback()
    assert load_settings({"host": "::1"}).host_is_loopback()
    assert load_settings({"host": "localhost"}).host_is_loopback()
    assert not load_settings({"host": "0.0.0.0"}).host_is_loopback()


def test_example_toml_loads_and_documents_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "chartgen.example.toml"
    assert load_settings(None, example).model_dump() == load_settings().model_dump()


def test_example_toml_names_every_setting() -> None:
    """Every settings key appears in the annotated example (set, or commented out for secrets/overrides)."""
    import re

    from config.settings import Settings

    text = (Path(__file__).resolve().parents[2] / "config" / "chartgen.example.toml").read_text()
    missing = [k for k in Settings.model_fields if not re.search(rf"^#?\s*{k}\b", text, re.MULTILINE)]
    secrets = {"binance_api_key", "binance_api_secret", "ccxt_api_key", "ccxt_api_secret"}
    assert [k for k in missing if k not in secrets] == []
