"""The shared kernel below every app: errors, sealing of secrets, base models, the document
registry (schemas, YAML), and the admin and API building blocks the apps' interfaces share.

It imports no app of the project (import-linter contract), so every app may import it.
"""
