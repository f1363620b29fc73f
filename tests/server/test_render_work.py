"""A small render runs on the event loop's thread, a large one on a worker thread."""

from __future__ import annotations

import threading

import anyio

from server.render_work import INLINE_MAX_BODY_BYTES, render_work


def test_small_bodies_render_inline_and_large_ones_on_a_worker_thread() -> None:
    async def main() -> tuple[int, int, int]:
        small = await render_work(lambda _: threading.get_ident(), None, INLINE_MAX_BODY_BYTES)
        large = await render_work(lambda _: threading.get_ident(), None, INLINE_MAX_BODY_BYTES + 1)
        return threading.get_ident(), small, large

    loop_thread, small, large = anyio.run(main)
    assert small == loop_thread
    assert large != loop_thread
