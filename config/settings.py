"""The one settings object: defaults < TOML file < ``CHARTGEN_*`` environment < CLI.

Build it once at start-up with :func:`load_settings`; components receive only the fields
they need.  Exchange endpoints are settings, so tests, ``--sim`` and real Binance share one
code path (design.md §3).
"""

from __future__ import annotations

import ipaddress
import os
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource

from config.channels import ChannelSettings, resolve_channels
from config.cluster_settings import ClusterSettings
from config.credentials import key_pair
from config.list_values import split_list
from config.toml_source import ConfigFileError, TomlSource, toml_path

DEFAULT_ENGINE_INDICATORS = ("cipher_b", "macd", "rsi")


class Settings(ClusterSettings):
    """Every setting of the daemon. Field docstrings are the documentation (``model_config``: the
    base class's — ``CHARTGEN_`` environment, unknown keys refused)."""

    # --- process -----------------------------------------------------------------------
    data_dir: Path | None = None
    """Where the database, trades.log and tokens live. Default: $STATE_DIRECTORY, else ~/.chartgen."""
    host: str = "127.0.0.1"
    """Address the HTTP server binds. Keep it on loopback and put a TLS proxy in front."""
    port: int = Field(default=9315, ge=0, le=65535)
    """TCP port of the HTTP server (0 picks a free one)."""
    base_url: str | None = None
    """Public URL of this server as clients see it (OAuth metadata). Env: CHARTGEN_BASE_URL."""
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Addresses (IPs or CIDR networks) of reverse proxies whose X-Forwarded-For / -Proto are believed.
    Empty (default): forwarded headers are ignored and the TCP peer is the client.
    Behind the nginx of docs/operations.md on the same host: ["127.0.0.1"]."""
    dashboard_enabled: bool = True
    """Serve the operator's web dashboard at /ui (sign-in with the operator passphrase)."""
    metrics_require_token: bool = False
    """Require a valid bearer token for /metrics even from a direct loopback connection (set it behind a proxy)."""
    max_unauthenticated_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Largest request body read before the bearer token is checked (unauthenticated requests)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Minimum log level."""
    log_format: Literal["auto", "json", "console"] = "auto"
    """auto: console on a TTY, JSON otherwise."""

    # --- market data -------------------------------------------------------------------
    binance_rest_url: str = "https://api.binance.com"
    """Binance REST origin; paths /api/v3/... are appended."""
    binance_stream_url: str = "wss://stream.binance.com:9443"
    """Binance market-stream origin; /ws/... and /stream?... are appended."""
    binance_ws_api_url: str = "wss://ws-api.binance.com:443/ws-api/v3"
    """Full Binance WebSocket API URL (orders and user data)."""
    yahoo_url: str = "https://query1.finance.yahoo.com"
    """Yahoo Finance chart API origin (stocks)."""
    futures_url: str = "https://fapi.binance.com"
    """Binance USD-M futures origin (funding, open interest, long/short indicators)."""
    fear_greed_url: str = "https://api.alternative.me"
    """alternative.me origin (fear & greed indicator)."""
    http_timeout_s: float = Field(default=10.0, gt=0, le=120)
    """Total timeout of one market-data HTTP request, in seconds."""
    market_cache_ttl_s: float = Field(default=15.0, ge=0, le=3600)
    """How long fetched klines are reused by chart and indicator tools."""

    # --- charts ------------------------------------------------------------------------
    render_workers: int = Field(default=2, ge=1, le=8)
    """Processes that build charts (PNG, series); with two or more, one client may use all but one of them."""
    render_warm_start: bool = True
    """Start the render processes at start and import matplotlib in each, so the first chart is fast;
    false: start them on the first chart (that chart takes about a second more; a daemon that only
    watches alerts or trades never pays their start-up CPU)."""
    max_renders_per_principal: int = Field(default=2, ge=1, le=64)
    """Charts (PNG or series payloads) one client may have in progress at once; the rest wait their turn."""
    max_bars: int = Field(default=5000, ge=10, le=50000)
    """Largest `bars` a chart or indicator request may ask for."""
    summary_signals: int = Field(default=20, ge=1, le=1000)
    """How many recent signals per indicator a summary lists unless all are requested."""

    # --- trading engine ----------------------------------------------------------------
    symbols: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["BTCUSDT"])
    """Symbols the engine follows (--symbol/-s)."""
    intervals: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["4h"])
    """Intervals the engine follows (--interval/-i); the first is the default for alerts."""
    indicators: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(DEFAULT_ENGINE_INDICATORS))
    """Indicators the engine keeps up to date on every closed bar (-p)."""
    testnet: bool = False
    """Use the Binance spot testnet for market data and orders."""
    exchange: str = Field(default="binance", pattern=r"^[a-z0-9_]{2,40}$")
    """Market data for the engine: ``binance`` (our own stream manager) or any ccxt.pro exchange id
    (--exchange, e.g. ``kraken``, ``okx``, ``bybit``); symbols are the exchange's market ids (BTCUSDT, XBTUSD)."""
    exchange_rest_url: str | None = None
    """Advanced: override the ccxt exchange's public REST API URL (e.g. a simulator's ``…/api/v3``)."""
    exchange_ws_url: str | None = None
    """Advanced: override the ccxt exchange's spot websocket URL."""
    binance_api_key: SecretStr | None = None
    """Binance API key (or BINANCE_API_KEY, or the systemd credential binance_api_key)."""
    binance_api_secret: SecretStr | None = None
    """Binance API secret (or BINANCE_API_SECRET, or the systemd credential binance_api_secret)."""

    # --- live engine tuning --------------------------------------------------------------
    engine_window_bars: int = Field(default=1000, ge=50, le=10_000)
    """Closed bars kept per (symbol, interval); warmed up from REST at start."""
    engine_backfill_concurrency: int = Field(default=32, ge=1, le=64)
    """Warm-up and gap-backfill requests in flight at once (the weight budget still paces them)."""
    engine_streams_per_connection: int = Field(default=1024, ge=1, le=1024)
    """Kline streams per websocket connection (Binance allows 1024)."""
    engine_stall_timeout_s: float = Field(default=9.0, gt=0, le=600)
    """A stream silent this long is declared stalled and replaced (Binance pushes every 2 s)."""
    engine_rotate_after_s: float = Field(default=84_600.0, gt=60)
    """Reconnect proactively before Binance's 24 h connection-age cut."""
    engine_reconnect_initial_s: float = Field(default=1.0, gt=0, le=60)
    """First reconnect delay; doubles (with jitter) up to engine_reconnect_max_s."""
    engine_reconnect_max_s: float = Field(default=60.0, gt=0, le=3600)
    """Longest reconnect delay."""
    binance_weight_limit: int = Field(default=6000, ge=10)
    """Binance's REQUEST_WEIGHT per minute; the engine budgets 80 % of it over any rolling minute."""
    sim_clock: Literal["manual", "real"] = "real"
    """Clock of the in-process simulator (--sim): real, or manual (moved by /sim/v1/advance)."""

    # --- alerts and notifications ----------------------------------------------------------
    alerts_max_per_client: int = Field(default=10_000, ge=1, le=1_000_000)
    """Most active alerts one client (token or stdio session) may hold."""
    notify_queue_cap: int = Field(default=1000, ge=1, le=1_000_000)
    """Push frames kept per subscription for offline delivery and Last-Event-ID replay (oldest dropped)."""
    notify_queue_ttl_s: float = Field(default=3600.0, gt=0, le=30 * 86400)
    """How long a push frame is kept for a client that is not connected."""
    notify_poll_cap: int = Field(default=10_000, ge=1, le=1_000_000)
    """Notifications kept per client for get_notifications (oldest dropped)."""
    sse_keepalive_s: float = Field(default=30.0, gt=0, le=3600)
    """Interval of ': keepalive' comments on idle notification streams."""
    max_streams_per_principal: int = Field(default=8, ge=1, le=1000)
    """Open notification streams (GET /mcp, /sse) one token may hold; a new one past it closes the oldest."""
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    """Notification channels, ``[channels.NAME]`` tables with kind = "webhook" | "telegram" | "ntfy"
    (docs/channels.md)."""
    notify_all_channels: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Channels that receive every principal's notifications (names of [channels.NAME] tables)."""
    channel_max_age_s: float = Field(default=86400.0, gt=0, le=30 * 86400)
    """How long a channel delivery is retried before it is marked failed (/status, /metrics, dashboard)."""

    # --- OAuth (remote clients such as Claude.ai connectors) -------------------------------
    oauth_enabled: bool = True
    """Serve the OAuth 2.1 authorization server (consent needs the operator passphrase)."""
    oauth_redirect_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["claude.ai", "claude.com", "localhost", "127.0.0.1", "::1"]
    )
    """Hosts (and their subdomains) OAuth clients may register redirect URIs on."""
    oauth_access_ttl_s: float = Field(default=3600.0, ge=60, le=86400)
    """Lifetime of an OAuth access token."""
    oauth_refresh_ttl_s: float = Field(default=30 * 86400.0, ge=3600, le=365 * 86400)
    """Lifetime of an OAuth refresh token (each use rotates it)."""

    # --- trading -------------------------------------------------------------------------
    broker: Literal["auto", "paper", "binance", "ccxt"] = "auto"
    """Where orders go. auto: Binance when API keys are set (testnet, --sim, or mainnet with --live), else paper.
    ccxt: the ccxt exchange ``ccxt_broker_exchange`` (its sandbox unless --live)."""
    ccxt_broker_exchange: str = Field(default="binance", pattern=r"^[a-z0-9_]{2,40}$")
    """The ccxt exchange id orders go to with broker = "ccxt"."""
    ccxt_api_key: SecretStr | None = None
    """API key for broker = "ccxt" (or the systemd credential ccxt_api_key)."""
    ccxt_api_secret: SecretStr | None = None
    """API secret for broker = "ccxt" (or the systemd credential ccxt_api_secret)."""
    ccxt_api_url: str | None = None
    """Advanced: the ccxt exchange's REST API URL for both public and private calls (tests: the simulator)."""

    live: bool = False
    """Allow orders on Binance mainnet (--live). Off by default: paper or testnet only."""
    paper_balances: Annotated[dict[str, Decimal], NoDecode] = Field(default_factory=lambda: {"USDT": Decimal(10000)})
    """Starting balances of the paper account, e.g. "USDT=10000,BTC=0.5" (used once, when it is created)."""
    paper_fee_rate: Decimal = Field(default=Decimal("0.001"), ge=0, le=Decimal("0.1"))
    """Paper commission rate (0.001 = 0.1 %), charged in the asset received as on Binance."""
    paper_slippage: Decimal = Field(default=Decimal("0.0005"), ge=0, le=Decimal("0.1"))
    """Paper market orders fill this fraction worse than the last price."""
    trading_max_order_notional: Decimal | None = Field(default=Decimal(10000), gt=0)
    """Largest order value in the quote asset; larger orders are refused before sending."""
    trading_max_daily_notional: Decimal | None = Field(default=Decimal(50000), gt=0)
    """Largest total order value per rolling 24 h."""
    trading_allowed_symbols: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Symbols orders may be placed on; empty = every listed symbol."""
    order_unresolved_grace_s: float = Field(default=30.0, ge=0, le=3600)
    """An order recorded but unknown to the exchange this long after it was sent is marked Rejected."""
    reconcile_interval_s: float = Field(default=30.0, gt=0, le=3600)
    """How often orders and trades are reconciled with the exchange."""
    schedule_misfire_grace_s: float = Field(default=300.0, ge=0, le=86400)
    """A scheduled order missed (daemon down, loop stalled) still runs, once, if at most this late."""

    # agent tools (docs/design.md §9)
    tool_groups: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["chart", "alerts", "trading", "portfolio", "journal"]
    )
    """Which tool groups tools/list offers and tools/call serves: chart, alerts, trading, portfolio, journal."""
    risk_free_rate: float = Field(default=0.0, ge=-0.05, le=0.5)
    """Annual risk-free rate trade_simulate's Sharpe ratio subtracts (0.04 = 4 % a year)."""
    risk_lookback_days: int = Field(default=365, ge=30, le=3650)
    """Days of daily closes trade_simulate's risk metrics are computed from."""
    agent_cache_ttl_s: float = Field(default=5.0, ge=0, le=3600)
    """Identical read calls of the agent tools within this many seconds are answered from cache (0: never;
    a tool may keep its answers for less, e.g. quotes)."""
    journal_max_bytes_per_principal: int = Field(default=64 * 1024 * 1024, ge=64 * 1024, le=1024**4)
    """Bytes of log_event data one principal's journal keeps (data as JSON plus tool_call_id); oldest dropped first."""
    journal_max_bytes: int = Field(default=1024**3, ge=64 * 1024, le=1024**4)
    """Bytes of log_event data the whole journal keeps, all principals together; everyone's oldest dropped first."""

    @field_validator("symbols", mode="before")
    @classmethod
    def _split_symbols(cls, v: Any) -> Any:
        return split_list(v, upper=True)

    @field_validator("tool_groups", mode="before")
    @classmethod
    def _split_groups(cls, v: Any) -> Any:
        out = split_list(v, upper=False)
        return [g.lower() for g in out] if isinstance(out, list) else out

    @field_validator("tool_groups")
    @classmethod
    def _check_groups(cls, v: list[str]) -> list[str]:
        known = ("chart", "alerts", "trading", "portfolio", "journal")
        for g in v:
            if g not in known:
                raise ValueError(f"tool_groups: unknown group {g!r}; use any of {', '.join(known)}")
        if not v:
            raise ValueError(f"tool_groups: name at least one of {', '.join(known)}")
        return v

    @field_validator("oauth_redirect_hosts", "trusted_proxies", "notify_all_channels", mode="before")
    @classmethod
    def _split_hosts(cls, v: Any) -> Any:
        return split_list(v, upper=False)

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, v: list[str]) -> list[str]:
        for item in v:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies: {item!r} is not an IP address or network; use e.g. 127.0.0.1 or 10.0.0.0/8"
                ) from None
        return v

    @field_validator("trading_allowed_symbols", mode="before")
    @classmethod
    def _split_allowed(cls, v: Any) -> Any:
        return split_list(v, upper=True)

    @field_validator("paper_balances", mode="before")
    @classmethod
    def _parse_balances(cls, v: Any) -> Any:
        if isinstance(v, str):
            out: dict[str, str] = {}
            for part in v.split(","):
                asset, sep, amount = part.partition("=")
                if not sep or not asset.strip():
                    raise ValueError(f"paper_balances must look like USDT=10000,BTC=0.5; got {v!r}")
                out[asset.strip().upper()] = amount.strip()
            return out
        return v

    @field_validator("intervals", "indicators", mode="before")
    @classmethod
    def _split_lists(cls, v: Any) -> Any:
        return split_list(v, upper=False)

    @field_validator("symbols")
    @classmethod
    def _check_symbols(cls, v: list[str]) -> list[str]:
        for s in v:
            if not s.isalnum() or len(s) > 20:
                raise ValueError(f"symbol {s!r} must be 1-20 letters or digits, e.g. BTCUSDT")
        return v

    @field_validator(
        "binance_rest_url", "binance_stream_url", "binance_ws_api_url", "yahoo_url", "futures_url", "fear_greed_url"
    )
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        if "://" not in v:
            raise ValueError(f"{v!r} is not a URL; expected e.g. https://api.binance.com")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _resolve_channels(self) -> Settings:
        """Channel secrets filled in from systemd credentials; a channel that cannot work is refused by key."""
        self.channels = resolve_channels(self.channels, self.notify_all_channels)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlSource(settings_cls))

    def binance_keys(self) -> tuple[str, str] | None:
        """(key, secret) from the settings, BINANCE_API_KEY/SECRET, or systemd credentials; None if absent."""
        key = self.binance_api_key.get_secret_value() if self.binance_api_key else os.environ.get("BINANCE_API_KEY")
        secret = (
            self.binance_api_secret.get_secret_value()
            if self.binance_api_secret
            else os.environ.get("BINANCE_API_SECRET")
        )
        return key_pair(key, secret, "binance")

    def ccxt_keys(self) -> tuple[str, str] | None:
        """(key, secret) for broker = "ccxt" from the settings or systemd credentials; None if absent."""
        key = self.ccxt_api_key.get_secret_value() if self.ccxt_api_key else None
        secret = self.ccxt_api_secret.get_secret_value() if self.ccxt_api_secret else None
        return key_pair(key, secret, "ccxt")

    def resolved_data_dir(self) -> Path:
        """The data directory: setting, else $STATE_DIRECTORY (systemd), else ~/.chartgen."""
        return resolve_data_dir(self.data_dir)

    def host_is_loopback(self) -> bool:
        """True when ``host`` only accepts connections from this machine."""
        return is_loopback_host(self.host)


def resolve_data_dir(explicit: Path | None) -> Path:
    """Setting, else the first path of $STATE_DIRECTORY, else ~/.chartgen."""
    if explicit is not None:
        return explicit.expanduser()
    state = os.environ.get("STATE_DIRECTORY")
    if state:
        return Path(state.split(":")[0])
    return Path.home() / ".chartgen"


def is_loopback_host(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_settings(overrides: dict[str, Any] | None = None, config_file: Path | None = None) -> Settings:
    """Build the settings: ``overrides`` (the CLI) > env > ``config_file`` (or $CHARTGEN_CONFIG) > defaults."""
    if config_file is None and os.environ.get("CHARTGEN_CONFIG"):
        config_file = Path(os.environ["CHARTGEN_CONFIG"])
    token = toml_path.set(config_file)
    try:
        clean = {k: v for k, v in (overrides or {}).items() if v is not None}
        return Settings(**clean)
    finally:
        toml_path.reset(token)


def settings_problems(exc: ValidationError | ConfigFileError) -> str:
    """The settings errors as "key: problem" in one line each, without the offending input (it may hold a secret)."""
    if isinstance(exc, ConfigFileError):
        return str(exc)
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        key = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{key}: {msg}" if key and not msg.startswith(key) else msg)
    return "; ".join(lines)
