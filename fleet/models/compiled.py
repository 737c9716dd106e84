"""Reads by key whose SQL is compiled once per process, not once per call.

Django compiles a queryset into SQL on every evaluation. For the reads every reconcile makes (the
Kyma with the four rows beside it, one query with four joins; a batch's ModuleConfigs,
SyncResources and certificates) the compiling cost more CPU than running the query and making
the model instances together: bench/fleet.py's profile put 1.4 ms of a no-op reconcile's ~10 ms
in ``SQLCompiler.as_sql`` for the Kyma alone (the joins' columns, the ordering ``first()`` adds).
:class:`CompiledGet` (one row by primary key) and :class:`CompiledQuery` (the rows whose field is
one of some keys) compile their queryset once per database alias, with a marker in place of the
key, then run that SQL through the connection's own cursor (the query is logged and counted as
any other) and build the instances as Django's ``ModelIterable`` does: ``Model.from_db`` and the
related rows' populators, with each column's converters. The instances are the ones the ORM
would have made.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, models, router
from django.db.models.query import get_related_populators

M = TypeVar("M", bound=models.Model)
# A key no row has, to find where the key goes among the compiled query's parameters.
_MARKER = -7_301_930_117
_PLACEHOLDER = re.compile(r"%%|%s")


@dataclass(frozen=True)
class _Plan:
    sql: str
    params: tuple[Any, ...]
    key_at: int  # the marker's index among the parameters
    model: type[models.Model]
    start: int
    end: int
    init_list: list[str]
    converters: list[tuple[int, tuple[list[Callable[..., Any]], Any]]]
    populators: list[Any]
    sql_before: str = ""  # (CompiledQuery) the SQL around the marker's placeholder
    sql_after: str = ""

    def instances(self, rows: Sequence[Sequence[Any]], using: str) -> list[models.Model]:
        connection = connections[using]
        found = []
        for fetched in rows:
            row = list(fetched)
            for position, (functions, expression) in self.converters:
                value = row[position]
                for function in functions:
                    value = function(value, expression, connection)
                row[position] = value
            obj = self.model.from_db(using, self.init_list, row[self.start : self.end])
            for populator in self.populators:
                populator.populate(row, obj)
            found.append(obj)
        return found


def _compile(queryset: models.QuerySet, using: str) -> _Plan:
    compiler = queryset.query.get_compiler(using=using)
    sql, params = compiler.as_sql()
    positions = [index for index, value in enumerate(params) if value == _MARKER]
    if len(positions) != 1:
        raise ValueError(f"cannot find the key among the parameters of {sql!r}")
    placeholders = [match for match in _PLACEHOLDER.finditer(sql) if match.group() == "%s"]
    if len(placeholders) != len(params):
        raise ValueError(f"cannot match the parameters of {sql!r} with its placeholders")
    marker = placeholders[positions[0]]
    select, info = compiler.select, compiler.klass_info
    fields = info["select_fields"]
    start, end = fields[0], fields[-1] + 1
    return _Plan(
        sql=sql,
        params=tuple(params),
        key_at=positions[0],
        model=info["model"],
        start=start,
        end=end,
        init_list=[column[0].target.attname for column in select[start:end]],
        converters=list(compiler.get_converters([s[0] for s in select[: compiler.col_count]]).items()),
        populators=get_related_populators(info, select, using),
        sql_before=sql[: marker.start()],
        sql_after=sql[marker.end() :],
    )


class _Compiled(Generic[M]):
    def __init__(self, build: Callable[[], models.QuerySet[M]]) -> None:
        self._build = build
        self._plans: dict[tuple[str, str], _Plan] = {}
        self._model: type[M] | None = None
        self._lock = threading.Lock()

    def _using(self, using: str | None) -> str:
        if using is not None:
            return using
        if self._model is None:
            self._model = self._build().model
        return router.db_for_read(self._model)

    def _plan(self, using: str, narrow: Callable[[models.QuerySet[M]], models.QuerySet[M]]) -> _Plan:
        key = (using, connections[using].vendor)
        plan = self._plans.get(key)
        if plan is None:
            plan = _compile(narrow(self._build()), using)
            with self._lock:
                self._plans[key] = plan
        return plan


class CompiledGet(_Compiled[M]):
    """``build().filter(pk=key)`` evaluated for one key, compiled once per alias. ``build`` must
    give a queryset of model instances (``filter`` and ``select_related`` allowed; no
    ``values()``, annotations, prefetches or slices)."""

    def get(self, key: Any, using: str | None = None) -> M | None:
        """The row of ``key`` (``None`` when there is none), from ``using`` (default: the
        router's database for reading the model)."""
        using = self._using(using)
        plan = self._by_key(using)
        return self._one(plan, using, plan.sql, (), key)

    def _by_key(self, using: str) -> _Plan:
        return self._plan(using, lambda queryset: queryset.filter(pk=_MARKER).order_by())

    def _one(self, plan: _Plan, using: str, sql: str, before: Sequence[Any], key: Any) -> M | None:
        """Run ``sql`` (the plan's, maybe with more before it: ``before``, its parameters) for
        ``key``; the instance of the row it finds."""
        params = list(plan.params)
        params[plan.key_at] = key
        with connections[using].cursor() as cursor:
            cursor.execute(sql, [*before, *params])
            found = cursor.fetchone()
        return None if found is None else plan.instances([found], using)[0]  # type: ignore[return-value]

    def get_after(
        self, key: Any, statement: str, params: Sequence[Any], *, table: str, using: str | None = None
    ) -> M | None:
        """:meth:`get` in the same statement as a write before it, on PostgreSQL (one round trip):
        ``statement``, an INSERT or UPDATE of ``table`` ending in ``RETURNING *``, becomes the
        query of a ``WITH`` clause, and the joined row of ``table`` is the one it returned (the
        rest of a statement does not see what its ``WITH`` query wrote). ``None`` when it
        returned no row for the key, or there is no such row."""
        using = self._using(using)
        connection = connections[using]
        if connection.vendor != "postgresql":
            raise ValueError("a write and a read in one statement needs PostgreSQL")
        plan = self._by_key(using)
        name = connection.ops.quote_name(table)
        join = f"LEFT OUTER JOIN {name} ON"
        if plan.sql.count(join) != 1:
            raise ValueError(f"{table} is not joined once in {plan.sql!r}")
        sql = f"WITH written AS ({statement}) " + plan.sql.replace(join, f"INNER JOIN written AS {name} ON")
        return self._one(plan, using, sql, params, key)


class CompiledQuery(_Compiled[M]):
    """``build().filter(<field>__in=keys)`` evaluated for any keys, compiled once per alias (the
    same SQL with as many placeholders as keys), in the queryset's order. ``build`` as for
    :class:`CompiledGet`."""

    def __init__(self, build: Callable[[], models.QuerySet[M]], field: str) -> None:
        super().__init__(build)
        self._field = field

    def rows(self, keys: Sequence[Any], using: str | None = None) -> list[M]:
        """The rows whose field is one of ``keys`` (no query when there are none)."""
        if not keys:
            return []
        using = self._using(using)
        plan = self._plan(using, lambda queryset: queryset.filter(**{f"{self._field}__in": [_MARKER]}))
        sql = plan.sql_before + ", ".join(["%s"] * len(keys)) + plan.sql_after
        params = [*plan.params[: plan.key_at], *keys, *plan.params[plan.key_at + 1 :]]
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        return plan.instances(found, using)  # type: ignore[return-value]
