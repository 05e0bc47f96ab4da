"""Settings: stage configs and their help, value ranges, named errors with their exit codes, hub errors."""
