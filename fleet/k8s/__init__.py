"""The runtime (SKR) client: the only package that talks to runtime clusters."""
