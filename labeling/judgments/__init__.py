"""Careful-reading judgments in one room: the file format and its reader (`format.py`), the live coverage judge that
appends to such a file (`live.py`), and every router scored against them (`report.py`)."""
