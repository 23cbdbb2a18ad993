"""Event subscriptions in a SQL store: the three operations of
:class:`durabl.stores.base.Backend` on the dialect's statements, each one transaction
(:class:`~durabl.stores.sql.store.SqlStore` takes them from this mixin)."""

from __future__ import annotations

from collections.abc import Sequence

from durabl.model.subscriptions import Subscription
from durabl.stores.sql.statements import C
from durabl.stores.sql.writes import SqlWrites


class SqlSubscriptions(SqlWrites[C]):
    """``upsert_subscriptions``, ``load_subscriptions``, ``delete_subscription``."""

    supports_subscriptions = True

    def upsert_subscriptions(self, subscriptions: Sequence[Subscription]) -> None:
        statement = self.sql.upsert_subscription
        rows = [{"event": s.event, "type": s.type} for s in sorted(set(subscriptions))]

        def upsert(tx: C) -> None:
            for row in rows:
                tx.execute(statement, row)

        if rows:
            self._run("upsert_subscriptions", upsert)

    def load_subscriptions(self, event: str | None = None) -> list[Subscription]:
        sql = self.sql
        statement = sql.load_subscriptions if event is None else sql.load_event_subscriptions
        rows = self._run(
            "load_subscriptions",
            lambda tx: tx.execute(statement, {"event": event}).fetchall(),
            write=False,
            single=True,
        )
        return sorted(Subscription(str(row["event"]), str(row["type"])) for row in rows)

    def delete_subscription(self, subscription: Subscription) -> bool:
        statement = self.sql.delete_subscription
        values = {"event": subscription.event, "type": subscription.type}
        return self._run(
            "delete_subscription",
            lambda tx: tx.execute(statement, values).rowcount == 1,
            single=True,
        )
