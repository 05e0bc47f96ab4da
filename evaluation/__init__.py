"""Offline evaluation of routers: counterfactual replay, live eval, metrics, intervals, reports, calibration."""
