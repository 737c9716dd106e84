"""The console: how people and automation reach the fleet. The Django admin and the fleet
dashboard, the REST API (``/api/v1/``), and the commands for the fleet's documents
(``credential``, ``rollout``, ``delete``). It sits on top: it reads and writes through the
services of ``fleet``, ``watchers``, ``pki`` and the ``reconciler`` below it, and nothing imports it
but the project's URLs."""
