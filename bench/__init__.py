"""Benchmarks (not tests): ``make bench`` prints a table and writes bench/results/latest.json."""
