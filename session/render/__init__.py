"""The render stage (pure, sync): OpenAI chat / completion and Anthropic messages requests →
vLLM 0.32-compatible ``GenerateRequest`` objects, with the model's tokenizer and chat template.

See ``docs/render.md`` for the rules and the documented differences from vLLM.
"""

from session.render.anthropic import to_openai_chat
from session.render.renderer import Renderer, new_request_id
from session.render.template import ChatTemplate

__all__ = ["ChatTemplate", "Renderer", "new_request_id", "to_openai_chat"]
