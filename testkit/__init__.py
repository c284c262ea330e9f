"""The test kit: what tests/ and bench/ both use to start and drive the real thing on loopback.

Daemons (daemon_proc, sim_daemon), cluster roles (workers, leaders), private PostgreSQL and
nats-server instances, nginx, channel receivers, the OAuth flow, a headless browser, strategies
for hypothesis, independent oracles, and the secret scan of logs. tests/ and bench/ import this
package and never each other's modules (tests/test_layering.py).
"""
