"""``python -m daemon`` runs the chartgen CLI."""

from daemon.cli import main

raise SystemExit(main())
