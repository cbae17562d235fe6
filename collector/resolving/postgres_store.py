"""PostgreSQL, through asyncpg: the source's one query, prepared once per connection, run with the
batch's ids bound as its array parameter `$1` (never written into the query text: an id holding
SQL is just an id nobody has). At start the prepared statement is checked: one parameter, an
array, and two result columns (id, text)."""
from __future__ import annotations

from typing import Any, Sequence

import asyncpg

from ctxprec.collector.resolving.config import PostgresSource
from ctxprec.collector.resolving.stores import StoreError

# Array element types whose values are numbers: ids that are not numbers cannot be in them.
_INTEGER_TYPES = {"int2", "int4", "int8", "smallint", "integer", "bigint"}


class PostgresStore:
    def __init__(self, config: PostgresSource, secret: str | None) -> None:
        self.config = config
        self._secret = secret
        self._pool: Any = None
        self._integers = False

    async def open(self) -> None:
        config = self.config
        self._pool = await asyncpg.create_pool(
            config.dsn, password=self._secret, min_size=1, max_size=config.max_concurrency,
            timeout=config.timeout_s, command_timeout=config.timeout_s,
            # The query is the source's own and constant: prepare it once per connection.
            statement_cache_size=16)
        async with self._pool.acquire() as connection:
            statement = await connection.prepare(config.query)
            columns = statement.get_attributes()
            parameters = statement.get_parameters()
        if len(columns) != 2:
            raise StoreError(f"the query must return two columns (id, text), it returns {len(columns)}")
        if len(parameters) != 1 or parameters[0].kind != "array":
            raise StoreError("the query must take one parameter, $1, the array of ids "
                             "(e.g. WHERE id = ANY($1))")
        self._integers = parameters[0].name.removesuffix("[]") in _INTEGER_TYPES

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]:
        values: list[Any] = list(ids)
        if self._integers:
            values = [int(i) for i in ids if _is_integer(i)]
            if not values:
                return {}
        rows = await self._pool.fetch(self.config.query, values)
        return {str(row[0]): row[1] for row in rows if isinstance(row[1], str)}

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def _is_integer(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True
