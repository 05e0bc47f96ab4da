"""Hindsight labeling: benchmark questions -> router training records (ANSWER / ESCALATE)."""
