"""Fakes at process boundaries: an OpenAI-compatible server, a server runner, clients."""
