"""The storage backends (SQLite, MongoDB over FerretDB) for attacks on what is stored."""

from tests.storage.conftest import backend, ferretdb_bin, mongodb_uri

__all__ = ["backend", "ferretdb_bin", "mongodb_uri"]
