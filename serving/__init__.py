"""Serving: the Router interface and its registry (router.py), the serve-time baselines (feature_router.py), the HTTP
endpoint, hub push/pull and the model card.

Importing the package registers every router kind: the feature routers subclass router.Router, so router.py cannot
import them without a circle; the package imports both, in that order.
"""

from serving import feature_router, router  # noqa: F401  (registers every router kind)
