"""Writes of the core domain (HackSoft style): keyword-only, validated, transactional."""
