"""The chartgen process: CLI, process modes, wiring, logging and (later) supervision.

Only this package wires concrete objects together (design.md §1).
"""
