"""The REST API (``/api/v1/``): documents in the upstream CR shapes, JSON or YAML."""
