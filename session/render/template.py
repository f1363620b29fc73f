"""A chat template bound to one tokenizer: compiled once (by transformers' own cached compiler, so
filters, globals and the ``{% generation %}`` extension are identical), rendered many times, exactly
as ``apply_chat_template`` renders. What is done once and what of transformers' input handling is
reproduced: docs/render.md, "How it works".
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jinja2
import jinja2.meta
import jinja2.nodes

from session.errors import RenderError

ContentFormat = Literal["string", "openai"]

# apply_chat_template's own keyword arguments, which vLLM accepts in chat_template_kwargs even
# when the template does not read them. They are never template variables here.
_APPLY_CHAT_TEMPLATE_PARAMS = frozenset({
    "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
    "tokenize", "sanitize_control_tokens", "padding", "truncation", "max_length", "return_tensors",
    "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
})
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_GENERATION_RE = re.compile(r"\{\%-?\s*generation\s*-?\%\}")


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered prompt: its text and, when asked for, the character spans the template marked
    with ``{% generation %}`` (assistant output)."""

    text: str
    generation_spans: tuple[tuple[int, int], ...] = ()


class ChatTemplate:
    """One compiled chat template. Thread-safe; :meth:`render` is pure."""

    def __init__(self, source: str, special_tokens: Mapping[str, Any]) -> None:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        self.source = source
        try:
            self._template: jinja2.Template = _compile_jinja_template(source)
            ast = self._template.environment.parse(source)
        except jinja2.TemplateError as exc:
            raise ValueError(f"the chat template does not compile: {exc.message}") from None
        self.variables: frozenset[str] = frozenset(jinja2.meta.find_undeclared_variables(ast))
        self.content_format: ContentFormat = detect_content_format(ast)
        self.marks_generation = bool(_GENERATION_RE.search(source))
        self._special = dict(special_tokens)
        # Generation tracking keeps state on a template's environment, so each tracked render
        # borrows a private copy (list pop/append are atomic; no two renders share one).
        self._tracking_pool: list[jinja2.Template] = []

    def template_kwargs(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The request's ``chat_template_kwargs`` the template can see: vLLM passes on only the
        template's own variables (apply_chat_template's parameters are handled by the caller)."""
        return {k: v for k, v in kwargs.items()
                if k in self.variables and k not in _APPLY_CHAT_TEMPLATE_PARAMS}

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
               documents: list[dict[str, Any]] | None = None, add_generation_prompt: bool = False,
               continue_final_message: bool = False, track_generation: bool = False,
               kwargs: Mapping[str, Any] | None = None) -> Rendered:
        """Render like ``apply_chat_template(..., tokenize=False)``. ``messages`` may be edited
        in place (callers pass freshly built dicts)."""
        if not messages:
            raise RenderError("messages must contain at least one message.", param="messages")
        chat = [_prepare_message(m) for m in messages]
        final_text = ""
        if continue_final_message:
            final_text = self._tag_final_message(chat)
        variables = {**self._special, **(kwargs or {})}
        try:
            if track_generation:
                text, spans = self._render_tracked(chat, tools, documents, add_generation_prompt, variables)
            else:
                text = self._template.render(messages=chat, tools=tools, documents=documents,
                                             add_generation_prompt=add_generation_prompt, **variables)
                spans = []
        except jinja2.TemplateError as exc:
            # raise_exception() in a template is addressed to the user ("only single tool-calls…")
            raise RenderError(f"The chat template rejected the conversation: {exc.message or type(exc).__name__}",
                              param="messages") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise RenderError(f"The chat template could not render this conversation ({type(exc).__name__}); "
                              "check the message roles and content types.", param="messages") from None
        if continue_final_message:
            text = _cut_at_final_message(text, final_text)
        return Rendered(text, tuple(spans))

    def _render_tracked(self, chat: list[dict[str, Any]], tools: Any, documents: Any,
                        add_generation_prompt: bool, variables: dict[str, Any]) -> tuple[str, list[tuple[int, int]]]:
        from transformers.utils.chat_template_utils import _cached_compile_jinja_template

        blocks: list[str] = []
        spans: list[tuple[int, int]] = []
        try:
            template = self._tracking_pool.pop()
        except IndexError:
            template = _cached_compile_jinja_template(self.source)  # a fresh, private environment
        try:
            with template.environment.activate_tracker(blocks, spans):  # type: ignore[attr-defined]
                for block in template.generate(messages=chat, tools=tools, documents=documents,
                                               add_generation_prompt=add_generation_prompt, **variables):
                    blocks.append(block)
                return "".join(blocks), spans
        finally:
            if len(self._tracking_pool) < 4:
                self._tracking_pool.append(template)

    def _tag_final_message(self, chat: list[dict[str, Any]]) -> str:
        last = chat[-1]
        final = last.get("content")
        if final is None:
            raise RenderError('continue_final_message is set but the final message has no "content" to continue.',
                              param="messages")
        if "content" not in self.source:
            raise RenderError("continue_final_message is set but the chat template does not read message content.",
                              param="continue_final_message")
        if isinstance(final, list):
            for block in reversed(final):
                if isinstance(block, dict) and "text" in block:
                    text = str(block["text"])
                    block["text"] = text + _CONTINUE_TAG
                    return text
            raise RenderError("continue_final_message is set but the final message has no text to continue.",
                              param="messages")
        last["content"] = final + _CONTINUE_TAG
        return str(final)


def _prepare_message(message: dict[str, Any]) -> dict[str, Any]:
    """transformers drops ``None`` values and aliases the reasoning field under its names."""
    msg = {k: v for k, v in message.items() if v is not None}
    reasoning = next((msg[k] for k in _REASONING_FIELDS if msg.get(k) is not None), None)
    if reasoning is not None:
        msg = {"thinking": reasoning, **msg, "reasoning_content": reasoning}
    return msg


def _cut_at_final_message(text: str, final: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise RenderError("continue_final_message is set but the chat template does not reproduce the final "
                          "message verbatim, so it cannot be continued.", param="continue_final_message")
    loc = text.rindex(tag)
    if text[loc:loc + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:loc]
    return text[:loc].rstrip()


# --- content format detection (vLLM's rule: does the template loop over message content?) ----


def detect_content_format(ast: jinja2.nodes.Template) -> ContentFormat:
    """``"openai"`` when the template iterates over ``message['content']`` (it wants a list of
    parts), else ``"string"`` (text parts are joined with newlines)."""
    try:
        next(_content_loops(ast))
    except StopIteration:
        return "string"
    return "openai"


def _is_var(node: jinja2.nodes.Node, name: str) -> bool:
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _is_attr(node: jinja2.nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _is_var_or_elems(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def _aliases(root: jinja2.nodes.Template, name: str) -> Iterator[str]:
    yield name
    pending = deque([name])
    seen = {name}
    while pending:
        current = pending.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if isinstance(assign.target, jinja2.nodes.Name) and _is_var_or_elems(assign.node, current):
                alias = assign.target.name
                if alias not in seen:
                    seen.add(alias)
                    pending.append(alias)
                    yield alias


def _message_loop_vars(root: jinja2.nodes.Template) -> Iterator[str]:
    names = list(_aliases(root, "messages"))
    for loop in root.find_all(jinja2.nodes.For):
        if isinstance(loop.target, jinja2.nodes.Name) and any(_is_var_or_elems(loop.iter, n) for n in names):
            yield loop.target.name


def _content_loops(root: jinja2.nodes.Template) -> Iterator[jinja2.nodes.For]:
    message_vars = list(_message_loop_vars(root))
    for loop in root.find_all(jinja2.nodes.For):
        if any(_is_var_or_elems(loop.iter, v, "content") for v in message_vars):
            yield loop
