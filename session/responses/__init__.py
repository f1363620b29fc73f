"""The OpenAI Responses API as the chat pipeline speaks it, both ways, sans-I/O: a Responses
request → the chat request it stands for (:mod:`session.responses.convert`), and the chat
derender output → Responses output items and stream events (:mod:`session.responses.events`).
The server runs the chat request through its one pipeline (``server/pipeline/``) in between
(``server/responses.py``). docs/responses.md.
"""
