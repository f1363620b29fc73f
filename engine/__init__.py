"""The generate stage: token ids in, token ids out.

Only ``engine.local`` imports torch; everything importable from here does not.
"""

from engine.errors import (
    EngineError,
    EngineInternalError,
    EngineOverloaded,
    EngineTimeout,
    EngineUnavailable,
    InvalidGenerateRequest,
)
from engine.interface import ChoiceDelta, Engine, EngineHealth, EngineOutput
from engine.protocol import GenerateRequest, GenerateResponse, GenerateStreamResponse, SamplingParams

__all__ = [
    "ChoiceDelta",
    "Engine",
    "EngineError",
    "EngineHealth",
    "EngineInternalError",
    "EngineOutput",
    "EngineOverloaded",
    "EngineTimeout",
    "EngineUnavailable",
    "GenerateRequest",
    "GenerateResponse",
    "GenerateStreamResponse",
    "InvalidGenerateRequest",
    "SamplingParams",
]
