"""HTTP routes, one module per concern. Each module exposes ``routes() -> list[server.routing.Route]``;
``server/app.py`` lists the modules explicitly and registers the routes whose group the gating
enables. A route module takes what it serves from the process's services (``server/services.py``,
built once at start-up) and imports no other route module; nothing outside ``server/routes/`` but
the app imports one (tests/project/test_import_rules.py)."""
