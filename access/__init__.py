"""Who may do what: people from the organisation's OpenID Connect provider, roles bound to its
groups, each role scoped to all runtimes or to the Kymas a label selector picks.

For whom: every door (admin, dashboard, API, watches, YAML, rollouts, the audit trail) asks this
app one question before it shows or changes a Kyma: *which Kymas may this user see, or change?*
The answer is computed in one place (:mod:`access.scope`) from the user's role bindings
(:class:`~access.models.FleetRoleBinding`), and every door calls it:

- the admin, through the model admins of every model that belongs to a Kyma
  (:mod:`access.admin_scope` wraps them once, from the declaration :data:`access.scope.SCOPED`);
- the API, through a filter backend and the default permission class (:mod:`access.api`);
- the dashboard, the ModuleConfig watch and rollouts, through :func:`access.scope.scoped` and
  :func:`access.scope.require`.

State: bindings (role, IdP groups and user names, a label selector) in the database, written
through :mod:`access.services` (admin, API, ``manage.py apply``), each write in the audit trail;
per user an :class:`~access.models.Identity` (where the account comes from, the groups its
provider gave it at its last login) and its open sessions (:class:`~access.models.OpenSession`),
so a logout ends them all.
"""
