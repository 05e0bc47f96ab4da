"""Training, in rooms side by side: the reader (reader/), the LM router (lm/), the features router (fit_features.py)."""
