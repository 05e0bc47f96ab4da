"""Offline evaluation of routers: counterfactual replay, metrics, intervals, reports, calibration."""
