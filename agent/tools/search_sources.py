"""Curated reliable domains per `source_category`, for web_search's post-filter.

An entry matches its host and every subdomain ("wikipedia.org" keeps "en.wikipedia.org").
Entries without a dot are public suffixes ("gov" keeps "nasa.gov"; "gov.uk" keeps
"ons.gov.uk"). Keep the lists short and conservative: a missing good site costs a result,
an unreliable one costs trust.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

__all__ = ["SOURCES", "SourceCategory", "host_matches", "searxng_category"]

SourceCategory = Literal["encyclopedia", "programming", "academic", "government", "finance", "news"]

SOURCES: dict[str, tuple[str, ...]] = {
    "encyclopedia": (
        "wikipedia.org",
        "britannica.com",
        "wikidata.org",
        "plato.stanford.edu",
        "iep.utm.edu",
        "scholarpedia.org",
        "larousse.fr",
        "treccani.it",
        "worldhistory.org",
    ),
    "programming": (
        "docs.python.org",
        "python.org",
        "developer.mozilla.org",
        "stackoverflow.com",
        "stackexchange.com",
        "github.com",
        "gitlab.com",
        "readthedocs.io",
        "readthedocs.org",
        "docs.rs",
        "rust-lang.org",
        "go.dev",
        "pkg.go.dev",
        "learn.microsoft.com",
        "docs.oracle.com",
        "cppreference.com",
        "kernel.org",
        "postgresql.org",
        "sqlite.org",
        "nodejs.org",
        "typescriptlang.org",
        "pypi.org",
        "npmjs.com",
        "web.dev",
        "w3.org",
        "ietf.org",
        "rfc-editor.org",
    ),
    "academic": (
        "arxiv.org",
        "doi.org",
        "pubmed.ncbi.nlm.nih.gov",
        "ncbi.nlm.nih.gov",
        "nature.com",
        "science.org",
        "springer.com",
        "link.springer.com",
        "sciencedirect.com",
        "wiley.com",
        "jstor.org",
        "acm.org",
        "ieee.org",
        "plos.org",
        "semanticscholar.org",
        "scholar.archive.org",
        "biorxiv.org",
        "medrxiv.org",
        "ssrn.com",
        "openalex.org",
        "edu",
        "ac.uk",
        "ac.jp",
    ),
    "government": (
        "gov",
        "mil",
        "gov.uk",
        "gouv.fr",
        "gc.ca",
        "gov.au",
        "govt.nz",
        "bund.de",
        "europa.eu",
        "admin.ch",
        "go.jp",
        "gov.in",
        "un.org",
        "who.int",
        "int",
    ),
    "finance": (
        "sec.gov",
        "federalreserve.gov",
        "ecb.europa.eu",
        "bis.org",
        "imf.org",
        "worldbank.org",
        "oecd.org",
        "bloomberg.com",
        "reuters.com",
        "ft.com",
        "wsj.com",
        "morningstar.com",
        "investopedia.com",
        "nasdaq.com",
        "nyse.com",
        "finance.yahoo.com",
        "bankofengland.co.uk",
    ),
    "news": (
        "reuters.com",
        "apnews.com",
        "bbc.co.uk",
        "bbc.com",
        "npr.org",
        "theguardian.com",
        "nytimes.com",
        "washingtonpost.com",
        "wsj.com",
        "ft.com",
        "economist.com",
        "bloomberg.com",
        "afp.com",
        "lemonde.fr",
        "dw.com",
        "aljazeera.com",
        "cbc.ca",
        "abc.net.au",
        "pbs.org",
        "nhk.or.jp",
    ),
}

_SEARXNG: dict[str, str] = {"programming": "it", "academic": "science", "news": "news"}


def host_matches(url: str, category: str) -> bool:
    """Whether the URL's host is one of the category's curated domains (or below one)."""
    try:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    if not host:
        return False
    return any(host == d or host.endswith("." + d) for d in SOURCES.get(category, ()))


def searxng_category(category: str) -> str | None:
    """The SearXNG category that best fits, or None for its general engines."""
    return _SEARXNG.get(category)
