"""How runs are kept: run directories, safe writes, the router metadata file, eval summaries, logs."""
