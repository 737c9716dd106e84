"""A read by primary key whose SQL is compiled once per process, not once per call.

Django compiles a queryset into SQL on every evaluation. For the read every reconcile starts with
(the Kyma with the four rows beside it, one query with four joins) the compiling cost more CPU
than running the query and making the five model instances together: bench/fleet.py's profile
put 1.4 ms of a no-op reconcile's ~10 ms in ``SQLCompiler.as_sql`` (the joins' columns, the
ordering ``first()`` adds). :class:`CompiledGet` compiles the queryset once per database alias
(with a marker in place of the key), then runs that SQL through the connection's own cursor
(the query is logged and counted as any other) and builds the instances as Django's
``ModelIterable`` does: ``Model.from_db`` and the related rows' populators, with each column's
converters. The instances are the ones the ORM would have made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, models, router
from django.db.models.query import get_related_populators

M = TypeVar("M", bound=models.Model)
# A key no row has, to find where the key goes among the compiled query's parameters.
_MARKER = -7_301_930_117


@dataclass(frozen=True)
class _Plan:
    sql: str
    params: tuple[Any, ...]
    key_at: int
    model: type[models.Model]
    start: int
    end: int
    init_list: list[str]
    converters: list[tuple[int, tuple[list[Callable[..., Any]], Any]]]
    populators: list[Any]


class CompiledGet(Generic[M]):
    """``build().filter(pk=key).order_by()`` evaluated for one key, compiled once per alias.
    ``build`` must give a queryset of model instances (``select_related`` allowed; no
    ``values()``, annotations or prefetches)."""

    def __init__(self, build: Callable[[], models.QuerySet[M]]) -> None:
        self._build = build
        self._plans: dict[tuple[str, str], _Plan] = {}
        self._model: type[M] | None = None
        self._lock = threading.Lock()

    def get(self, key: int, using: str | None = None) -> M | None:
        """The row of ``key`` (``None`` when there is none), from ``using`` (default: the
        router's database for reading the model)."""
        if using is None:
            if self._model is None:
                self._model = self._build().model
            using = router.db_for_read(self._model)
        connection = connections[using]
        plan = self._plans.get((using, connection.vendor)) or self._compile(using)
        params = list(plan.params)
        params[plan.key_at] = key
        with connection.cursor() as cursor:
            cursor.execute(plan.sql, params)
            found = cursor.fetchone()
        if found is None:
            return None
        row = list(found)
        for position, (functions, expression) in plan.converters:
            value = row[position]
            for function in functions:
                value = function(value, expression, connection)
            row[position] = value
        obj = plan.model.from_db(using, plan.init_list, row[plan.start : plan.end])
        for populator in plan.populators:
            populator.populate(row, obj)
        return obj  # type: ignore[return-value]

    def _compile(self, using: str) -> _Plan:
        connection = connections[using]
        compiler = self._build().filter(pk=_MARKER).order_by().query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        positions = [index for index, value in enumerate(params) if value == _MARKER]
        if len(positions) != 1:
            raise ValueError(f"cannot find the key among the parameters of {sql!r}")
        select, info = compiler.select, compiler.klass_info
        fields = info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        plan = _Plan(
            sql=sql,
            params=tuple(params),
            key_at=positions[0],
            model=info["model"],
            start=start,
            end=end,
            init_list=[column[0].target.attname for column in select[start:end]],
            converters=list(compiler.get_converters([s[0] for s in select[: compiler.col_count]]).items()),
            populators=get_related_populators(info, select, using),
        )
        with self._lock:
            self._plans[(using, connection.vendor)] = plan
        return plan
