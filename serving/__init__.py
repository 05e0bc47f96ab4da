"""Serving: the routers (routers/), the serve-time signals they share (signals.py), the HTTP endpoint (server.py),
hub push/pull (hub.py) and the model card (model_card.py)."""
