"""Tooling of the repository that is no part of the product (the documentation build)."""
