"""`gangway api`: the read-model query API (FastAPI, OpenAPI at /openapi.json), its server-sent decision
stream, Prometheus metrics and the dashboard, over the read model the projector keeps (projections/readmodel/).
It sits in replay/, the top layer, because it answers queue positions and estimated starts with the deciders'
shared core (services/core/forecast.py)."""
