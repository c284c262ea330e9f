"""The cluster's settings (docs/design.md §11, docs/cluster.md): PostgreSQL, the event bus, the
order account and the membership's timing.

:class:`ClusterSettings` is the base of :class:`config.settings.Settings` (which adds every other
setting and the sources); it exists so the settings module stays one screenful per concern.  A
single-node daemon reads none of these.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from config.credentials import read_credential


class ClusterSettings(BaseSettings):
    """The scale-out settings. Field docstrings are the documentation."""

    model_config = SettingsConfigDict(
        env_prefix="CHARTGEN_",
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    postgres_dsn: SecretStr | None = None
    """The cluster's PostgreSQL (``postgresql://user:password@host:5432/db``): read by ``chartgen cluster
    migrate | status``, ``chartgen worker``, ``chartgen leader`` and fronts (``--serve --cluster``);
    the single-process daemon keeps SQLite.  Env: CHARTGEN_POSTGRES_DSN."""
    bus: Literal["local", "nats"] = "local"
    """How a cluster's workers tell its fronts about fired notifications: "local" — PostgreSQL's
    NOTIFY from the firing transaction; "nats" — NATS JetStream at ``nats_url`` (fan-out off the
    database). Set the same value on every worker and front. A single-node daemon keeps its
    in-process bus whatever this says."""
    nats_url: str | None = None
    """NATS server(s) for bus = "nats": ``nats://HOST:4222`` (several comma-separated; a password in
    the URL is never logged)."""
    bus_limits: dict[str, float] = Field(default_factory=dict)
    """Overrides of the JetStream streams' limits (cluster/bus_streams.py ``BusLimits``: e.g.
    ``{ notify_max_bytes = 268435456, duplicate_window_s = 120 }``); JetStream reserves each stream's
    ``max_bytes`` on its disk, so a small disk needs smaller sizes."""
    cluster_account: str = Field(default="main", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """The exchange account a cluster's fronts and order leaders share: the order lease
    ``orders/<account>``, its intents and its halt switch. Letters, digits, ``_ . -``."""
    cluster_leader_ttl_s: float = Field(default=6.0, ge=1, le=60)
    """The order lease's time to live: a dead leader's successor takes over within about this long."""
    cluster_order_wait_s: float = Field(default=10.0, gt=0, le=120)
    """How long a front waits for an order leader to take a place_order before withdrawing it
    (answered "not sent")."""
    cluster_heartbeat_s: float = Field(default=1.0, gt=0, le=30)
    """A cluster worker's heartbeat, market-assignment refresh and hand-over-mark period (seconds)."""
    cluster_backfill_max_s: float = Field(default=300.0, gt=0, le=3600)
    """A worker taking over a market checks the trades of the gap since the old owner's mark, the
    newest this many seconds of it at most (REST weight grows with the gap; Binance serves an hour)."""
    cluster_liveness_s: float = Field(default=4.0, gt=0, le=300)
    """A cluster member silent this long is dead: its markets move to the live workers. At least
    three heartbeats (a worker whose heartbeat is late is not yet dead)."""

    @model_validator(mode="after")
    def _cluster_timing(self) -> ClusterSettings:
        if self.cluster_liveness_s < 3 * self.cluster_heartbeat_s:
            raise ValueError(
                f"cluster_liveness_s ({self.cluster_liveness_s:g}) must be at least three heartbeats"
                f" (cluster_heartbeat_s = {self.cluster_heartbeat_s:g}): raise it or shorten the heartbeat"
            )
        return self

    @model_validator(mode="after")
    def _bus_needs_url(self) -> ClusterSettings:
        if self.bus == "nats" and not (self.nats_url or "").strip():
            raise ValueError('bus = "nats" needs nats_url (e.g. nats://127.0.0.1:4222), or set bus = "local"')
        return self

    def cluster_dsn(self) -> str | None:
        """The cluster's PostgreSQL DSN: the systemd credential ``postgres_dsn`` if there is one, else
        the ``postgres_dsn`` setting; None if neither."""
        from_setting = self.postgres_dsn.get_secret_value() if self.postgres_dsn else None
        return read_credential("postgres_dsn") or from_setting
