"""What an engine request's outputs become on the generate wire (server/generate_output.py): the
stream chunk, the usage event, and the whole answer for ``/inference/v1/generate`` and for the
pipeline's non-streaming derender."""

from __future__ import annotations

from engine.interface import ChoiceDelta, EngineOutput
from engine.protocol import GenerateRequest, TokenLogprob, UsageInfo
from server.generate_output import GenerateOutputs


def request(**sampling: object) -> GenerateRequest:
    return GenerateRequest.model_validate({"token_ids": [1, 2, 3], "sampling_params": sampling})


def lp(t: int) -> TokenLogprob:
    return TokenLogprob(token_id=t, logprob=-0.5)


def test_chunks_count_the_tokens_and_the_usage_is_counted_unless_the_engine_reports_it() -> None:
    outputs = GenerateOutputs(request(logprobs=0), "generate-tokens-x")
    chunk = outputs.chunk(EngineOutput("x", [ChoiceDelta(0, [7, 8], [lp(7), lp(8)])]), running_usage=True)
    assert chunk is not None
    running = chunk.pop("usage")
    assert (running["prompt_tokens"], running["completion_tokens"], running["total_tokens"]) == (3, 2, 5)
    assert chunk == {"request_id": "generate-tokens-x", "output_mode": "tokens",
                     "choices": [{"index": 0, "finish_reason": None, "stop_reason": None, "token_ids": [7, 8],
                                  "logprobs": {"content": [{"token_id": 7, "logprob": -0.5, "rank": None,
                                                            "top_logprobs": []},
                                                           {"token_id": 8, "logprob": -0.5, "rank": None,
                                                            "top_logprobs": []}]}}]}
    assert outputs.chunk(EngineOutput("x", [], finished=True)) is None  # usage-only: no event
    assert outputs.usage == UsageInfo.of(3, 2)
    assert outputs.usage_chunk() == {"request_id": "generate-tokens-x", "output_mode": "tokens", "choices": [],
                                     "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    outputs.chunk(EngineOutput("x", [ChoiceDelta(0, [9], finish_reason="stop")], finished=True,
                               usage=UsageInfo.of(3, 9)))
    assert outputs.usage == UsageInfo.of(3, 9)  # the engine's own word


def test_the_whole_answer_keeps_each_choice_and_for_derender_every_choice_ends() -> None:
    outputs = GenerateOutputs(request(n=3, logprobs=0), "cmpl-1")
    outputs.add(EngineOutput("x", [ChoiceDelta(0, [1], [lp(1)]), ChoiceDelta(1, [2], [lp(2)])]))
    outputs.add(EngineOutput("x", [ChoiceDelta(0, [3], [lp(3)], finish_reason="stop", stop_reason=5)]))
    outputs.stop(1)  # derender saw a stop string in choice 1
    outputs.stop(0)  # the engine's finish stays
    assert outputs.finished() == 2
    served = outputs.response("m")
    assert [(c.index, c.token_ids, c.finish_reason, c.stop_reason) for c in served.choices] == [
        (0, [1, 3], "stop", 5), (1, [2], "length", None)]
    assert served.usage == UsageInfo.of(3, 3)
    whole = outputs.response("m", n=3)
    assert [(c.index, c.token_ids, c.finish_reason) for c in whole.choices] == [
        (0, [1, 3], "stop"), (1, [2], "length"), (2, [], "abort")]
    assert whole.choices[0].logprobs is not None and [e.token_id for e in whole.choices[0].logprobs.content] == [1, 3]
    assert whole.choices[2].logprobs is None  # a choice without logprobs has none, not an empty list
