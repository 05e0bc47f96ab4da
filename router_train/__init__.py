"""Training, in rooms side by side: the reader (reader/), the language-model router (lm/), the features router (fit_features.py)."""
