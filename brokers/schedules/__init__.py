"""Scheduled orders (design.md §8): recurring place_order runs on the daemon's one scheduler.

:mod:`~brokers.schedules.cron` reads crontab strings, :mod:`~brokers.schedules.spec` the timing
arguments and the misfire rule, :mod:`~brokers.schedules.store` owns the ``schedules`` table,
:mod:`~brokers.schedules.service` runs them (its docstring states the misfire policy).
"""
