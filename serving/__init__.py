"""Serving: the routers, their serve-time signals, the HTTP endpoint, hub push/pull and the model card."""
