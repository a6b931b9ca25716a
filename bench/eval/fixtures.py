"""The eval's world: fixed data behind its Python tools, and the pages served on loopback.

Every figure a task's answer is checked against comes from here (or from the real clock), so a
right answer is one the tools made possible, not one a model could know.
"""

from __future__ import annotations

WEATHER: dict[str, tuple[int, str]] = {
    "oslo": (-3, "light snow"),
    "rome": (17, "sunny"),
    "lima": (19, "cloudy"),
    "cairo": (28, "clear skies"),
    "berlin": (6, "rain"),
    "paris": (9, "overcast"),
    "madrid": (14, "windy"),
    "lisbon": (15, "partly cloudy"),
}

# Units of each currency per US dollar: chosen so the tasks' results are whole numbers.
RATES: dict[str, float] = {"USD": 1.0, "EUR": 0.9, "GBP": 0.8, "JPY": 150.0, "CHF": 0.88}

ORDERS: dict[str, dict[str, str]] = {
    "A-1042": {"status": "shipped", "destination": "Lisbon", "eta": "2026-12-03"},
    "B-2210": {"status": "processing", "destination": "Oslo", "eta": "2026-12-09"},
}

CONTACTS: dict[str, dict[str, str]] = {
    "dana": {"name": "Dana Whitfield", "city": "Rome", "phone": "+39 06 5550 1234"},
    "omar": {"name": "Omar Haddad", "city": "Cairo", "phone": "+20 2 5550 8877"},
}

ZONES = {"rome": "Europe/Rome", "berlin": "Europe/Berlin", "lisbon": "Europe/Lisbon"}


def _page(title: str, body: str) -> bytes:
    filler = " ".join(
        "<p>Our team is happy to help with any question you may have about our services.</p>"
        for _ in range(3)
    )
    html = (
        f"<!doctype html><html><head><title>{title}</title></head><body>"
        f"<nav>Home · About · Contact</nav><main><h1>{title}</h1>{body}{filler}</main>"
        "<footer>© 2026 Harbor Street Services</footer></body></html>"
    )
    return html.encode()


PAGES: dict[str, bytes] = {
    "/hours.html": _page(
        "Harbor Street Library: opening hours",
        "<p>The library opens at 08:30 and closes at 17:00, Monday to Friday.</p>"
        "<p>On Saturdays it opens at 10:00 and closes at 14:00. It is closed on Sundays.</p>",
    ),
    "/lamp.html": _page(
        "Aurora desk lamp",
        "<p>The Aurora desk lamp has a warm LED and a brass arm.</p>"
        "<p>Price: 49.90 EUR, including shipping within the EU.</p>",
    ),
    "/team.html": _page(
        "About the project",
        "<p>The project lead is Mirela Kovac, who founded it in 2019.</p>"
        "<p>The design lead is Tomas Lindqvist.</p>",
    ),
    "/hotel.html": _page(
        "Hotel Meridian",
        "<p>Hotel Meridian is a quiet hotel by the old harbour.</p>"
        "<p>It has 42 rooms, a rooftop terrace and a small library.</p>",
    ),
}
