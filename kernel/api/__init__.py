"""DRF building blocks shared by every app's API: errors, pagination, permissions, YAML, documents."""
