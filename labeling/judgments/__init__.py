"""Careful-reading judgments: the file format (`format.py`), the live coverage judge (`live.py`), reports."""
