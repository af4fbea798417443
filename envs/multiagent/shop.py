"""A small online-shop database (users, products, orders) in SQLite, and the tools over it.

`Shop.generate(rng)` builds a random shop; `Session` adds who the assistant has
authenticated; `shop_tools(session)` exposes the operations as gemkit tools. A shop pickles
as its SQL dump, so an env holding one can be cloned and sent to other processes.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from gemkit.tools.function import FunctionTool, tool

SIZES = ("XS", "S", "M", "L", "XL")
FIRST_NAMES = tuple("Ana Ben Chloe Dev Eva Farid Grace Hugo Ines Jon Kira Liam".split())
LAST_NAMES = tuple("Lopez Smith Chen Patel Novak Haddad Kim Berg Silva Okafor".split())
PRODUCTS = (
    ("T-shirt", 19.0),
    ("Hoodie", 49.0),
    ("Jacket", 89.0),
    ("Sneakers", 69.0),
    ("Jeans", 59.0),
    ("Rain coat", 99.0),
)
SCHEMA = """
CREATE TABLE users (user_id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL);
CREATE TABLE products (product_id TEXT PRIMARY KEY, name TEXT NOT NULL, price REAL NOT NULL,
                       sizes TEXT NOT NULL);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, product_id TEXT NOT NULL,
                     size TEXT NOT NULL, status TEXT NOT NULL, amount REAL NOT NULL,
                     refunded REAL NOT NULL DEFAULT 0);
"""
TABLES = ("users", "products", "orders")


class ShopError(Exception):
    """An operation the shop refuses; the message says why and what is allowed."""


class Shop:
    """An in-memory SQLite shop; operations check the shop's rules and raise `ShopError`."""

    def __init__(self, sql: str | None = None):
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.conn.executescript(sql if sql is not None else SCHEMA)

    @classmethod
    def generate(cls, rng: np.random.Generator, num_users: int = 5) -> Shop:
        """A random shop: products with a few sizes each, users with 2-4 orders each."""
        shop = cls()
        c = shop.conn
        for k, (name, price) in enumerate(PRODUCTS):
            sizes = sorted(rng.choice(len(SIZES), size=int(rng.integers(3, 6)), replace=False))
            c.execute(
                "INSERT INTO products VALUES (?, ?, ?, ?)",
                (f"P{k + 1}", name, price, ",".join(SIZES[i] for i in sizes)),
            )
        products = c.execute("SELECT product_id, price, sizes FROM products").fetchall()
        picks = rng.choice(len(FIRST_NAMES) * len(LAST_NAMES), size=num_users, replace=False)
        order_ids = rng.choice(9000, size=num_users * 4, replace=False) + 1000
        n = 0
        for u, pick in enumerate(picks):
            first, last = FIRST_NAMES[pick // len(LAST_NAMES)], LAST_NAMES[pick % len(LAST_NAMES)]
            uid = f"{first.lower()}_{last.lower()}_{u + 1}"
            c.execute(
                "INSERT INTO users VALUES (?, ?, ?)",
                (uid, f"{first} {last}", f"{first.lower()}.{last.lower()}@example.com"),
            )
            # every user has a pending and a delivered order, so any goal can be drawn
            statuses = ["pending", "delivered"] + [
                ("pending", "delivered")[int(rng.integers(2))]
                for _ in range(int(rng.integers(0, 3)))
            ]
            for status in statuses:
                pid, price, sizes = products[int(rng.integers(len(products)))]
                options = sizes.split(",")
                c.execute(
                    "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, 0)",
                    (
                        f"#W{order_ids[n]}",
                        uid,
                        pid,
                        options[int(rng.integers(len(options)))],
                        status,
                        price,
                    ),
                )
                n += 1
        c.commit()
        return shop

    # -- state ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every table's rows, sorted: two shops are equal when their snapshots are."""
        return {
            t: sorted(tuple(r) for r in self.conn.execute(f"SELECT * FROM {t}")) for t in TABLES
        }

    def copy(self) -> Shop:
        """An independent shop with the same rows."""
        new = Shop(sql="")
        self.conn.backup(new.conn)
        return new

    def __getstate__(self) -> dict[str, Any]:
        return {"sql": "\n".join(self.conn.iterdump())}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(sql=state["sql"])  # type: ignore[misc]

    def __deepcopy__(self, memo: dict[int, Any]) -> Shop:
        return self.copy()

    # -- reads ----------------------------------------------------------------------------

    def _row(self, sql: str, key: str, what: str) -> dict[str, Any]:
        row = self.conn.execute(sql, (key,)).fetchone()
        if row is None:
            raise ShopError(f"no {what} {key!r}")
        return dict(row)

    def user_by_email(self, email: str) -> dict[str, Any]:
        """The user with this email."""
        return self._row(
            "SELECT * FROM users WHERE lower(email) = lower(?)", email.strip(), "user with email"
        )

    def user(self, user_id: str) -> dict[str, Any]:
        """A user and the ids of their orders."""
        user = self._row("SELECT * FROM users WHERE user_id = ?", user_id, "user")
        rows = self.conn.execute(
            "SELECT order_id FROM orders WHERE user_id = ? ORDER BY order_id", (user_id,)
        )
        user["orders"] = [r[0] for r in rows]
        return user

    def order(self, order_id: str) -> dict[str, Any]:
        """An order with its product's name."""
        order = self._row("SELECT * FROM orders WHERE order_id = ?", _order_id(order_id), "order")
        order["product"] = self.product(order["product_id"])["name"]
        return order

    def product(self, product_id: str) -> dict[str, Any]:
        """A product with its available sizes."""
        product = self._row("SELECT * FROM products WHERE product_id = ?", product_id, "product")
        product["sizes"] = product["sizes"].split(",")
        return product

    # -- writes ---------------------------------------------------------------------------

    def modify_size(self, order_id: str, size: str) -> dict[str, Any]:
        """Change a pending order's size to one the product has."""
        order = self.order(order_id)
        if order["status"] != "pending":
            raise ShopError(
                f"order {order['order_id']} is {order['status']}; only pending orders can be modified"
            )
        sizes = self.product(order["product_id"])["sizes"]
        size = size.strip().upper()
        if size not in sizes:
            raise ShopError(f"{order['product']} comes in sizes {', '.join(sizes)}, not {size!r}")
        self.conn.execute(
            "UPDATE orders SET size = ? WHERE order_id = ?", (size, order["order_id"])
        )
        return self.order(order["order_id"])

    def cancel(self, order_id: str) -> dict[str, Any]:
        """Cancel a pending order."""
        order = self.order(order_id)
        if order["status"] != "pending":
            raise ShopError(
                f"order {order['order_id']} is {order['status']}; only pending orders can be cancelled"
            )
        self.conn.execute(
            "UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (order["order_id"],)
        )
        return self.order(order["order_id"])

    def refund(self, order_id: str) -> dict[str, Any]:
        """Refund a delivered order in full."""
        order = self.order(order_id)
        if order["status"] != "delivered":
            raise ShopError(
                f"order {order['order_id']} is {order['status']}; only delivered orders can be refunded"
            )
        self.conn.execute(
            "UPDATE orders SET status = 'refunded', refunded = amount WHERE order_id = ?",
            (order["order_id"],),
        )
        return self.order(order["order_id"])


def _order_id(order_id: str) -> str:
    order_id = order_id.strip()
    return order_id if order_id.startswith("#") else f"#{order_id}"


class Session:
    """A shop plus the user the assistant has authenticated (writes need one)."""

    def __init__(self, shop: Shop):
        self.shop = shop
        self.user_id: str | None = None

    def own_order(self, order_id: str) -> str:
        """The order id, once checked to belong to the authenticated user."""
        if self.user_id is None:
            raise ShopError("authenticate the customer first with find_user_by_email")
        order = self.shop.order(order_id)
        if order["user_id"] != self.user_id:
            raise ShopError(f"order {order['order_id']} does not belong to the authenticated user")
        return order["order_id"]


def shop_tools(session: Session) -> list[FunctionTool]:
    """The assistant's tools over `session`: lookups, then writes on the user's own orders."""

    @tool(thread=False)
    def find_user_by_email(email: str) -> dict[str, Any]:
        """Find the customer's account by email and authenticate them for this conversation.

        Args:
            email: The email address the customer gave.
        """
        user = session.shop.user(session.shop.user_by_email(email)["user_id"])
        session.user_id = user["user_id"]
        return user

    @tool(thread=False)
    def get_order(order_id: str) -> dict[str, Any]:
        """Look up an order: product, size, status and amount.

        Args:
            order_id: The order id, e.g. "#W1234".
        """
        return session.shop.order(order_id)

    @tool(thread=False)
    def get_product(product_id: str) -> dict[str, Any]:
        """Look up a product and the sizes it comes in.

        Args:
            product_id: The product id, e.g. "P2".
        """
        return session.shop.product(product_id)

    @tool(thread=False)
    def modify_order_size(order_id: str, size: str) -> dict[str, Any]:
        """Change the size of one of the customer's pending orders.

        Args:
            order_id: The order id, e.g. "#W1234".
            size: The new size, one the product comes in (XS, S, M, L or XL).
        """
        return session.shop.modify_size(session.own_order(order_id), size)

    @tool(thread=False)
    def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancel one of the customer's pending orders.

        Args:
            order_id: The order id, e.g. "#W1234".
        """
        return session.shop.cancel(session.own_order(order_id))

    @tool(thread=False)
    def refund_order(order_id: str) -> dict[str, Any]:
        """Refund one of the customer's delivered orders in full.

        Args:
            order_id: The order id, e.g. "#W1234".
        """
        return session.shop.refund(session.own_order(order_id))

    reads = [find_user_by_email, get_order, get_product]
    return [*reads, modify_order_size, cancel_order, refund_order]
