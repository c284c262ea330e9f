"""``python -m daemon`` runs the chartgen CLI."""

from daemon.commands.cli import main

raise SystemExit(main())
