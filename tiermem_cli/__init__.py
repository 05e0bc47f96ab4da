"""The command line, the demo and the runtime's ingest/ask: everything above the stages."""
