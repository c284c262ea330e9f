"""The live market feed: Binance combined streams, REST backfill and start-up warm-up."""
