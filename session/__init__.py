"""The sans-I/O core: protocol models, render, incremental derender, parsers, state codec, frames.

No sockets, no asyncio/anyio, no torch, nothing from ``server``.
"""
