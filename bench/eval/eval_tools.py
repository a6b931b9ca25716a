"""The eval's own Python tools (`[tools] modules`), with fixed data (bench/eval/fixtures.py).

They fail as real tools do: an unknown city, order or currency raises ToolError, which the
model reads as a failed call.
"""

from __future__ import annotations

from typing import Any

from agent.errors import ToolError
from agent.tools.python import tool
from bench.eval.fixtures import CONTACTS, ORDERS, RATES, WEATHER


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather (temperature in °C and conditions) in a city."""
    found = WEATHER.get(city.strip().lower().split(",")[0])
    if found is None:
        raise ToolError(f"No weather data for {city!r}: the weather service does not know it.")
    temperature, conditions = found
    return {"city": city, "temperature_c": temperature, "conditions": conditions}


@tool
def convert_currency(amount: float, from_currency: str, to_currency: str) -> dict[str, Any]:
    """Convert an amount of money between currencies, by ISO code (USD, EUR, GBP, JPY, CHF)."""
    source, target = from_currency.strip().upper(), to_currency.strip().upper()
    for code in (source, target):
        if code not in RATES:
            raise ToolError(f"Unknown currency code {code!r}: no exchange rate for it.")
    converted = round(amount / RATES[source] * RATES[target], 2)
    return {"amount": amount, "from": source, "to": target, "result": converted}


@tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up one of the customer's orders by its id (like A-1042): status, destination, ETA."""
    found = ORDERS.get(order_id.strip().upper())
    if found is None:
        raise ToolError(f"No order with the id {order_id!r} exists.")
    return {"order_id": order_id.strip().upper(), **found}


@tool
def lookup_contact(name: str) -> dict[str, str]:
    """Look up a person in the user's address book by first name: full name, city, phone."""
    found = CONTACTS.get(name.strip().lower().split()[0] if name.strip() else "")
    if found is None:
        raise ToolError(f"Nobody called {name!r} is in the address book.")
    return found
