"""What more than one of agent/, mixin/, alerts/, dashboards/ and report/ needs, and nothing else:
the duration grammar, the YAML config reader, the help-printing click group, the HTTP
connection (URL, credentials, TLS) a client command makes.

It imports none of them, so the mixin can use these without importing the agent while
the report and the agent's CLI import the mixin (tests/test_import_cycles.py keeps the
packages free of import cycles).
"""
