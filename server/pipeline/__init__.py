"""The one place that chains render → generate → derender, for every full pipeline (OpenAI and
Anthropic endpoints, JSON and SSE, and the WebSocket ``chat`` / ``completion`` / ``messages``
frames). Its modules, each importing only those above it:

- ``prepare``: validate and render a request, build its derenderers (:class:`Prepared`);
- ``checkpoint``: a resumable stream's signed checkpoints, and resuming from one;
- ``stream``: the events of one streaming pipeline (:class:`PipelineStream`);
- ``complete``: the non-streaming answer;
- ``chain``: :class:`Pipeline`, which runs them for the routes and the WebSocket session.

How a token travels through them: docs/serve.md, "How a request flows".
"""

from server.pipeline.chain import Pipeline

__all__ = ["Pipeline"]
