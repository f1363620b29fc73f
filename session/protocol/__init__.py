"""Request models of the APIs tokenwire speaks: OpenAI (chat, completions) and Anthropic (messages).

Pure pydantic; imports neither transformers nor torch, so ``client_sdk`` may use them.
"""

from session.protocol.anthropic import MessagesRequest
from session.protocol.openai import ChatCompletionRequest, ChatMessage, CompletionRequest, Tool

__all__ = ["ChatCompletionRequest", "ChatMessage", "CompletionRequest", "MessagesRequest", "Tool"]
