"""gemma4 (Gemma 4 ``<|tool_call>call:NAME{key:<|"|>v<|"|>}<tool_call|>`` and the ``<|channel>``
thinking channel): vectors whose expected splits are vLLM 0.32's non-streaming answers (its gemma4
engine grammar, recorded with vLLM for these texts; the parity cases in
tests/data/vllm/parsers/gemma4.json check the same through the derender route), checked one-shot and
over random splits, a property test over fragments of the format, the snapshot's size, and the
argument converter against a straightforward reading of vLLM's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS, MalformedSnapshot, ParserContext
from session.parsers.reasoning.gemma4 import Gemma4ReasoningParser
from session.parsers.tool.gemma4 import DROPPED, Gemma4ToolParser
from session.parsers.tool.gemma4_args import PLAIN_GUARD
from session.parsers.tool.json_stream import is_plain_without
from session.parsers.tool.schema_values import always_string, coerce, types_of

from .parsers_harness import Split, fold, one_shot, random_splits, skipping, split_at, streamed

T, R = Gemma4ToolParser, Gemma4ReasoningParser
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"}, "score": {"type": "number"}, "exact": {"type": "boolean"},
        "note": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "properties": {"max_results": {"type": "integer"}, "lang": {"type": "string"},
                                                     "safe": {"type": "boolean"}}},
        "tags": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "plain_tool", "parameters": {"type": "object"}}},
)
CTX = {
    "auto": ParserContext(tools=TOOLS),
    "none": ParserContext(tools=TOOLS, tool_choice="none"),
    "notools": ParserContext(),
    "single": ParserContext(tools=TOOLS, parallel_tool_calls=False),
}
D = '<|"|>'

TOOL_VECTORS: list[tuple[str, str, str, Split]] = [
    ('plain content', 'auto',
     'The capital of France is Paris.',
     Split(content='The capital of France is Paris.')),
    ('one call', 'auto',
     '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>',
     Split(calls=(('get_weather', '{"location": "Paris"}'),))),
    ('content before a call loses its trailing whitespace', 'auto',
     'Let me check.\n\n<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>',
     Split(content='Let me check.', calls=(('get_weather', '{"location": "Paris"}'),))),
    ('two calls', 'auto',
     '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|><|tool_call>call:get_weather{location:<|"|>Oslo<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>',
     Split(calls=(('get_weather', '{"location": "Paris"}'), ('get_weather', '{"location": "Oslo", "unit": "celsius"}')))),
    ('schema types: integer, number, boolean, null', 'auto',
     '<|tool_call>call:get_weather{days:3,score:0.5,exact:true,note:null,location:<|"|>Rome<|"|>}<tool_call|>',
     Split(calls=(('get_weather', '{"days": 3, "score": 0.5, "exact": true, "note": null, "location": "Rome"}'),))),
    ('integral number, integer in quotes, bool as 1', 'auto',
     '<|tool_call>call:get_weather{score:2.0,days:<|"|>4<|"|>,exact:1}<tool_call|>',
     Split(calls=(('get_weather', '{"score": 2, "days": 4, "exact": true}'),))),
    ('nested object and array, typed through the schema', 'auto',
     '<|tool_call>call:search{filters:{max_results:5,lang:<|"|>en<|"|>,safe:false},tags:[<|"|>a<|"|>,<|"|>b<|"|>],query:<|"|>q<|"|>}<tool_call|>',
     Split(calls=(('search', '{"filters": {"max_results": 5, "lang": "en", "safe": false}, "tags": ["a", "b"], "query": "q"}'),))),
    ('a function the request did not list: every value a string', 'auto',
     '<|tool_call>call:get_time{zone:<|"|>UTC<|"|>,offset:2,dst:false,list:[1,2]}<tool_call|>',
     Split(calls=(('get_time', '{"zone": "UTC", "offset": "2", "dst": "false", "list": ["1", "2"]}'),))),
    ('a tool without properties: strings', 'auto',
     '<|tool_call>call:plain_tool{n:1,flag:true}<tool_call|>',
     Split(calls=(('plain_tool', '{"n": "1", "flag": "true"}'),))),
    ('unicode, quotes, backslashes and control characters', 'auto',
     '<|tool_call>call:search{query:<|"|>café "q" \\n\\\\ \n\t東京 😀<|"|>}<tool_call|>',
     Split(calls=(('search', '{"query": "café \\"q\\" \\\\n\\\\\\\\ \\n\\t東京 😀"}'),))),
    ('empty arguments', 'auto',
     '<|tool_call>call:get_weather{}<tool_call|>',
     Split(calls=(('get_weather', '{}'),))),
    ('a name and then the end marker: {}', 'auto',
     '<|tool_call>call:get_weather<tool_call|>',
     Split(calls=(('get_weather', '{}'),))),
    ('parenthesised arguments', 'auto',
     '<|tool_call>call:get_weather(location:<|"|>Paris<|"|>,days:2)<tool_call|>',
     Split(calls=(('get_weather', '{"location": "Paris", "days": 2}'),))),
    ('text after a call is dropped', 'auto',
     '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|> I will wait.',
     Split(calls=(('get_weather', '{"location": "Paris"}'),))),
    ('a stray end marker in content is dropped', 'auto',
     'Hello <tool_call|>world',
     Split(content='Hello world')),
    ('special tokens the grammar does not name are dropped', 'auto',
     'Hi<turn|> there<eos><|tool_call>call:get_weather{loc<bos>ation:<|"|>Pa<|turn>ris<|"|>}<tool_call|>',
     Split(content='Hi there', calls=(('get_weather', '{"location": "Paris"}'),))),
    ('a call without its end marker', 'auto',
     '<|tool_call>call:get_weather{location:<|"|>Madrid<|"|>}',
     Split(calls=(('get_weather', '{"location": "Madrid"}'),))),
    ('output cut inside a string argument', 'auto',
     '<|tool_call>call:get_weather{location:<|"|>San Fran',
     Split(calls=(('get_weather', '{"location": "San Fran"}'),))),
    ('cut inside a nested object: a partial delimiter is dropped', 'auto',
     '<|tool_call>call:f{a:{b:<|"|>xy<|',
     Split(calls=(('f', '{"a": {"b": "xy"}}'),))),
    ('cut inside an array: a partial delimiter stays', 'auto',
     '<|tool_call>call:f{a:[<|"|>xy<|',
     Split(calls=(('f', '{"a": ["xy<|"]}'),))),
    ("cut inside a nested object after a value ending in '.'", 'auto',
     '<|tool_call>call:f{a:{b:1.,c:2',
     Split(calls=(('f', '{"a": {}}'),))),
    ("a closed nested object keeps a value ending in '.'", 'auto',
     '<|tool_call>call:f{a:{b:1.,c:2}}<tool_call|>',
     Split(calls=(('f', '{"a": {"b": "1.", "c": "2"}}'),))),
    ('a key with no value at the end of the arguments', 'auto',
     '<|tool_call>call:f{a:<|"|>x<|"|>,b:}<tool_call|>',
     Split(calls=(('f', '{"a": "x", "b": ""}'),))),
    ('a missing value stops the reader', 'auto',
     '<|tool_call>call:f{a:,b:1}<tool_call|>',
     Split(calls=(('f', '{}'),))),
    ("JSON-style arguments are read as Gemma's", 'auto',
     '<|tool_call>call:get_weather{"location": "Paris"}<tool_call|>',
     Split(calls=(('get_weather', '{"\\"location\\"": "\\"Paris\\""}'),))),
    ('a call without a name is dropped', 'auto',
     'Before <|tool_call>call:{a:1}<tool_call|> after',
     Split(content='Before  after')),
    ('whitespace-only content before a call is dropped', 'auto',
     '\n\n<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>',
     Split(calls=(('get_weather', '{"location": "Paris"}'),))),
    ('a delimited key', 'auto',
     '<|tool_call>call:f{<|"|>my key<|"|>:1}<tool_call|>',
     Split(calls=(('f', '{"my key": "1"}'),))),
    ('a string for an object-typed property is parsed', 'auto',
     '<|tool_call>call:search{filters:<|"|>{"lang": "fr"}<|"|>,query:<|"|>x<|"|>}<tool_call|>',
     Split(calls=(('search', '{"filters": {"lang": "fr"}, "query": "x"}'),))),
    ('a missing call prefix: no call', 'auto',
     'Calling <|tool_call>get_weather(location="Paris")<tool_call|>',
     Split(content='Calling ')),
    ('bare values with spaces', 'auto',
     '<|tool_call>call:f{a: two words ,b:  7  }<tool_call|>',
     Split(calls=(('f', '{"a": "two words", "b": "7"}'),))),
    ('tool_choice none: the text outside calls', 'none',
     'I will not. <|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|> Done.',
     Split(content='I will not.  Done.')),
    ('no tools: the calls are read and dropped', 'notools',
     'Sure. <|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|> later',
     Split(content='Sure.')),
    ('parallel_tool_calls false: the first call only', 'single',
     '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|><|tool_call>call:get_weather{location:<|"|>Oslo<|"|>}<tool_call|>',
     Split(calls=(('get_weather', '{"location": "Paris"}'),))),
]
REASONING_VECTORS: list[tuple[str, str, Split]] = [
    ('thinking, then the answer', '<|channel>thought\nThe user asks 2+2.<channel|>4.',
     Split(content='4.', reasoning='The user asks 2+2.')),
    ('no channel: all content', 'Just an answer.',
     Split(content='Just an answer.')),
    ('an unclosed channel: all reasoning', '<|channel>thought\nStill thinking',
     Split(reasoning='Still thinking')),
    ('a spurious thought label starts reasoning', 'thought\nThe answer is 4.',
     Split(reasoning='The answer is 4.')),
    ("only 'thought'", 'thought',
     Split()),
    ("'thought' closed at once", 'thought<channel|>Answer',
     Split(content='Answer')),
    ("a prefix of 'thought' closed at once is reasoning", 'th<channel|>Answer',
     Split(content='Answer', reasoning='th')),
    ('the label and trailing whitespace are dropped', '<|channel>thought\n\n  Think.  \n\n<channel|>Done',
     Split(content='Done', reasoning='\n  Think.')),
    ('a tool call ends reasoning and is content', '<|channel>thought\nCall it.<|tool_call>call:f{}<tool_call|>',
     Split(content='<|tool_call>call:f{}<tool_call|>', reasoning='Call it.')),
    ('two channel blocks: one reasoning', '<|channel>thought\nA <channel|>Hi<|channel>more<channel|> there',
     Split(content='Hi there', reasoning='A more')),
    ('a channel end outside reasoning is dropped', '<|channel>a<channel|>Hello <channel|>world',
     Split(content='Hello world', reasoning='a')),
    ("a stray call end is dropped, a call's own is content", 'a<tool_call|>b<|tool_call>x<tool_call|>c<tool_call|>',
     Split(content='ab<|tool_call>x<tool_call|>c')),
    ('special tokens are dropped', '<|channel>thought\nA<turn|>B<channel|>C<eos>D',
     Split(content='CD', reasoning='AB')),
    ("'thought' followed by text is content", 'thoughtful words',
     Split(content='thoughtful words')),
    ("'thought' and spaces then text", 'thought  about it',
     Split(content='thought  about it')),
    ('a channel opened inside reasoning is dropped', '<|channel>thought\nA<|channel>B<channel|>C',
     Split(content='C', reasoning='AB')),
]


@pytest.mark.parametrize(("mode", "text", "want"), [v[1:] for v in TOOL_VECTORS], ids=[v[0] for v in TOOL_VECTORS])
def test_tool_vectors_one_shot_and_split(mode: str, text: str, want: Split) -> None:
    ctx = CTX[mode]
    assert one_shot(T, text, ctx) == want
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(T, chunks, ctx) == want


@pytest.mark.parametrize(("text", "want"), [v[1:] for v in REASONING_VECTORS], ids=[v[0] for v in REASONING_VECTORS])
def test_reasoning_vectors_one_shot_and_split(text: str, want: Split) -> None:
    assert one_shot(R, text, CTX["auto"]) == want
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(R, chunks, CTX["auto"]) == want


def chained(chunks: list[str], ctx: ParserContext = CTX["auto"]) -> Split:
    """As the derenderer chains them: the reasoning parser, then its content into the tool parser,
    both rebuilt from their JSON snapshots between chunks."""
    reasoning, tool = R(ctx), T(ctx)
    deltas = []
    for chunk in [*chunks, None]:
        r = reasoning.feed(chunk) if chunk is not None else reasoning.finish()
        t = tool.feed(r.content)
        if chunk is None:
            t.extend(tool.finish())
        t.reasoning = r.reasoning
        deltas.append(t)
        if chunk is not None:
            reasoning = R.restore(ctx, json.loads(json.dumps(reasoning.snapshot())))
            tool = T.restore(ctx, json.loads(json.dumps(tool.snapshot())))
    return fold(deltas)


PARIS = f"<|tool_call>call:get_weather{{location:{D}Paris{D},days:2}}<tool_call|>"
CHAINED: list[tuple[str, str, Split]] = [
    ("thinking then a call", f"<|channel>thought\nI need the weather.<channel|>{PARIS}",
     Split(reasoning="I need the weather.", calls=(("get_weather", '{"location": "Paris", "days": 2}'),))),
    ("a call straight from reasoning", f"<|channel>thought\nCall it.{PARIS}",
     Split(reasoning="Call it.", calls=(("get_weather", '{"location": "Paris", "days": 2}'),))),
    ("thinking, content, a call", f"<|channel>thought\nHmm.<channel|>Checking.\n{PARIS}",
     Split(content="Checking.", reasoning="Hmm.", calls=(("get_weather", '{"location": "Paris", "days": 2}'),))),
    ("thinking then an answer", "<|channel>thought\n2+2.\n<channel|>It is 4.",
     Split(content="It is 4.", reasoning="2+2.")),
    ("a channel end inside arguments is dropped (vLLM's reasoning pass drops it)",
     f"<|tool_call>call:f{{a:{D}x<channel|>y{D}}}<tool_call|>", Split(calls=(("f", '{"a": "xy"}'),))),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in CHAINED], ids=[c[0] for c in CHAINED])
def test_chained_vectors(text: str, want: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert chained(chunks) == want


FRAGMENTS = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", D, D, "<|\"", "<|", "<", "thought\n", "thought",
             "th", "call:", "call:get_weather", "call:search", ":", "{", "}", "[", "]", "(", ")", ",", " ", "\n", "\t",
             "\r", "location", "days", "filters", "tags", "query", "note", "max_results", "3", "1.", "0.5", "true",
             "null", "x y", "é", "東京", "😀", '"', "\\", "<turn|>", "<eos>", "<|tool_response>", "<tool|", ".", "\u00a0"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


@pytest.mark.parametrize("mode", sorted(CTX))
@settings(max_examples=150, deadline=None)
@given(text=texts, data=st.data())
def test_tool_parser_streams_like_one_shot_for_any_split(mode: str, text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(T, split_at(text, cuts), CTX[mode]) == one_shot(T, text, CTX[mode])


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_reasoning_parser_streams_like_one_shot_for_any_split(text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(R, split_at(text, cuts), CTX["auto"]) == one_shot(R, text, CTX["auto"])


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_chained_parsers_stream_like_one_shot_for_any_split(text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    assert chained(split_at(text, cuts)) == chained([text])


# -- arguments: streamed as they are written, with a small state --------------------------------


def test_a_long_string_argument_streams_and_the_snapshot_stays_small() -> None:
    ctx = CTX["auto"]
    parser = T(ctx)
    head = parser.feed(f"<|tool_call>call:search{{query:{D}")
    assert head.tool_calls[0].name == "search"
    streamed_args = "".join(c.arguments for c in head.tool_calls)
    word = "streaming é 東京 "
    for k in range(1400):  # ~20k characters
        sent = "".join(c.arguments for c in parser.feed(word).tool_calls)
        # all of it at once, but the trailing space (held: the arguments' end strips whitespace)
        assert sent == (" " if k else "") + word.rstrip(" ")
        streamed_args += sent
        snap = parser.snapshot()
        assert len(json.dumps(snap)) < 1024
        parser = T.restore(ctx, json.loads(json.dumps(snap)))
    tail = parser.feed(f"{D}}}<tool_call|>")
    streamed_args += "".join(c.arguments for c in tail.tool_calls)
    streamed_args += "".join(c.arguments for c in parser.finish().tool_calls)
    assert json.loads(streamed_args) == {"query": word * 1400}


def test_each_character_of_a_string_argument_is_sent_when_it_arrives() -> None:
    parser = T(CTX["auto"])
    parser.feed(f"<|tool_call>call:get_weather{{location:{D}")
    sent = ["".join(d.arguments for d in parser.feed(c).tool_calls) for c in "San Francisco"]
    assert sent == ["S", "a", "n", "", " F", *"rancisco"]  # (a space waits for what follows it)


def test_long_reasoning_keeps_the_snapshot_small() -> None:
    ctx = CTX["auto"]
    parser = R(ctx)
    out = parser.feed("<|channel>thought\n").reasoning
    for k in range(2000):
        out += parser.feed(f"step {k} ").reasoning
        snap = parser.snapshot()
        assert len(json.dumps(snap)) < 1024
        parser = R.restore(ctx, json.loads(json.dumps(snap)))
    out += parser.feed("<channel|>Done.").reasoning
    assert out == "".join(f"step {k} " for k in range(2000)).rstrip()


def test_nested_values_stream_before_their_object_closes() -> None:
    parser = T(CTX["auto"])
    text = f"<|tool_call>call:search{{filters:{{lang:{D}en{D},max_results:5,"
    args = "".join(c.arguments for c in parser.feed(text).tool_calls)
    assert args == '{"filters": {"lang": "en", "max_results": 5'


# -- the converter's typing rules (vLLM's coerce_to_schema_type) ------------------------------


@pytest.mark.parametrize(("value", "types", "want"), [
    ("3", ["integer"], 3), (" 3 ", ["integer"], 3), ("3.0", ["number"], 3), ("2.5", ["number"], 2.5),
    ("1e3", ["number"], 1000), ("inf", ["number"], "inf"), ("x", ["integer"], "x"), ("[1, 2]", ["integer"], [1, 2]),
    ("true", ["boolean"], True), ("0", ["bool"], False), ("yes", ["boolean"], "yes"), ("null", ["string", "null"], None),
    ("NULL", ["null"], None), ("hi", ["string", "null"], "hi"), ('{"a": 1}', ["object"], {"a": 1}),
    ("[1]", ["array"], [1]), ("5", ["string", "integer"], 5), ("5", ["str"], "5"), ("NaN", ["foo"], "NaN"),
])
def test_coerce_as_vllm(value: str, types: list[str], want: Any) -> None:
    got = coerce(value, types_of({"type": types}))
    assert got == want and type(got) is type(want)


def test_schema_types_and_streaming_strings() -> None:
    assert sorted(types_of({"anyOf": [{"type": "integer"}, {"enum": ["a", None]}]}) or ()) == ["integer", "null", "string"]
    assert types_of({}) == {"string"}
    assert always_string(None) and always_string(types_of({"type": "string"})) and always_string(types_of({"type": "TEXT"}))
    assert not always_string(types_of({"type": ["string", "null"]})) and not always_string(types_of({"type": "integer"}))


# -- the contract --------------------------------------------------------------------------------


def test_registered_under_vllms_names() -> None:
    assert TOOL_PARSERS["gemma4"] is T and REASONING_PARSERS["gemma4"] is R
    # the markers are special tokens of Gemma 4's tokenizer; vLLM reads "none" / named / required with the grammar
    assert T.needs_special_tokens and R.needs_special_tokens and T.engine_based and R.engine_based
    assert not T.supports_required_and_named


@pytest.mark.parametrize("snapshot", [
    {}, {"p": "hermes", "m": "text", "b": "", "n": 0}, {"p": "gemma4", "m": "text"},
    {"p": "gemma4", "m": "bogus", "b": "", "n": 0, "f": "", "c": "", "a": None, "d": False, "w": "", "s": False},
    {"p": "gemma4", "m": "args", "b": "", "n": 1, "f": "", "c": "f", "a": [1, 2], "d": True, "w": "", "s": False},
])
def test_tool_restore_refuses_a_bad_snapshot(snapshot: dict[str, Any]) -> None:
    with pytest.raises(MalformedSnapshot):
        T.restore(CTX["auto"], snapshot)


@pytest.mark.parametrize("snapshot", [{}, {"p": "qwen3", "m": "content", "b": "", "s": False},
                                      {"p": "gemma4", "m": "x", "b": "", "h": "", "w": "", "t": False},
                                      {"p": "gemma4", "m": "content", "b": "", "h": 3, "w": "", "t": False}])
def test_reasoning_restore_refuses_a_bad_snapshot(snapshot: dict[str, Any]) -> None:
    with pytest.raises(MalformedSnapshot):
        R.restore(CTX["auto"], snapshot)


def test_the_gemma4_tokenizer_has_the_markers_at_their_ids(tokenizer: Any) -> None:
    """The asset's tokenizer is Gemma 4's: the markers are single special tokens at their real ids,
    and the special tokens the grammar neither uses nor keeps are exactly the ones dropped."""
    tok = tokenizer("gemma-4")
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>",
                                                      "<channel|>", "<turn|>", "<|tool_response>")}
    assert ids == {"<|tool_call>": 48, "<tool_call|>": 49, '<|"|>': 52, "<|channel>": 100, "<channel|>": 101,
                   "<turn|>": 106, "<|tool_response>": 50}
    kept = {"<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>"}
    assert set(tok.all_special_tokens) - kept == set(DROPPED)
    text = f"<|channel>thought\nWeather.<channel|>Sure.{PARIS}<|tool_response>"
    enc = tok.encode(text, add_special_tokens=False)
    assert enc.count(48) == enc.count(49) == 1 and enc.count(52) == 2
    chunks = [tok.decode([i], skip_special_tokens=False) for i in enc]
    assert chained(chunks) == Split(content="Sure.", reasoning="Weather.",
                                    calls=(("get_weather", '{"location": "Paris", "days": 2}'),))


# -- the derenderer's shortcut inside a string argument ------------------------------------------


@pytest.mark.parametrize("mode", sorted(CTX))
def test_the_args_shortcut_inside_a_string_argument_splits_as_feeding(mode: str) -> None:
    ctx = CTX[mode]
    head = ["<|channel>thought\nHm.<channel|>Ok.", "<|tool_call>", "call:search{", "query:", D, "Par"]
    # each piece the reader would hold or count goes through the parsers: a trailing space or "}",
    # a "(" / ")", a "<" (a delimiter, a marker); the rest is skipped
    body = ["is", " a", " city ", "of", " 東京 😀", ' "q"', "\\n", "f(x)", " a}", "b", "))", "<eos>", "c", "\n", ".",
            D, ",tags:[", D, "x", " y", D, ",", D, "z z", "<|", '"|>', "]", ",filters:{lang:", D, "fr", D, "}",
            ",query:", D, "tail", "  "]
    chunks = [*head, *body, "<tool_call|>", "Bye."]
    reasoning, tool = R(ctx), T(ctx)
    for chunk in head:
        tool.feed(reasoning.feed(chunk).content)
    reported = mode in ("auto", "single")
    assert reasoning.plain_content_guard() == "<"
    assert tool.plain_args_call() == (0 if reported else None)
    assert tool.plain_args_guard() is PLAIN_GUARD
    for cut in (len(chunks) - 1, len(chunks)):  # ending inside the string too (its trailing run is stripped)
        skipped: list[str] = []
        assert skipping(T(ctx), chunks[:cut], R(ctx), skipped) == chained(["".join(chunks[:cut])], ctx)
        # (after a text whose end the reader holds, the next one is fed: "of", "b", "c", ".")
        assert skipped == (["Par", "is", " a", " 東京 😀", "x", " y", "z z", "fr", "tail"] if reported else [])


def test_the_args_shortcut_covers_what_streams_unchanged() -> None:
    for text, covered in (("plain words", True), ("東京 😀", True), ("x.", True), ("a{b", True),
                          ("word ", False), ("word\u3000", False), ("a}", False), ("f(x", False), ("x)", False),
                          ("a<b", False), ('"q"', False), ("\n", False)):
        assert is_plain_without(text, PLAIN_GUARD) is covered, text


HEADS = ["", f"<|tool_call>call:search{{query:{D}", f"<|tool_call>call:search{{tags:[{D}a{D},{D}",
         f"<|tool_call>call:search{{filters:{{lang:{D}", f"<|tool_call>call:plain_tool{{a:{{b:[{D}",
         f"<|tool_call>call:search{{filters:{{lang:1.,q:{D}", f"<|tool_call>call:get_weather{{days:{D}"]


@settings(max_examples=300, deadline=None)
@given(text=texts, plain=st.sampled_from(["plain words", "東京 😀", "x.", "a{b", "1", "é", "word ", "a}", "f(x)"]),
       data=st.data())
def test_where_the_args_shortcut_is_offered_feeding_returns_the_text_and_changes_nothing(
        text: str, plain: str, data: st.DataObject) -> None:
    """After any text, split anywhere: where the shortcut is offered and covers ``plain``, feeding
    it returns exactly ``plain`` as the call's arguments and leaves the state as it was; and the
    derenderer's skipping split equals the one-shot one."""
    ctx = CTX[data.draw(st.sampled_from(["auto", "single"]))]
    text = data.draw(st.sampled_from(HEADS)) + text
    tool = T(ctx)
    for chunk in split_at(text, data.draw(st.lists(st.integers(0, len(text)), max_size=10))):
        tool.feed(chunk)
        call = tool.plain_args_call()
        if call is not None and is_plain_without(plain, tool.plain_args_guard()):
            twin = T.restore(ctx, json.loads(json.dumps(tool.snapshot())))
            before = twin.snapshot()
            got = twin.feed(plain)
            assert (got.content, [(c.index, c.name, c.arguments) for c in got.tool_calls]) == ("", [(call, None, plain)])
            assert twin.snapshot() == before
    chunks = split_at(text + plain * 3, data.draw(st.lists(st.integers(0, len(text) + 3 * len(plain)), max_size=20)))
    assert skipping(T(ctx), chunks, R(ctx)) == chained([text + plain * 3], ctx)


@settings(max_examples=300, deadline=None)
@given(text=texts, plain=st.sampled_from(["plain words", "東京 😀", "x.", "word ", "tab\t", "a<b", "\u00a0"]),
       data=st.data())
def test_where_the_reasoning_parser_offers_a_shortcut_feeding_returns_the_text_and_changes_nothing(
        text: str, plain: str, data: st.DataObject) -> None:
    """plain_reasoning_guard (with plain_reasoning_hold_space: not a text that ends in whitespace)
    and plain_content_guard, after any text split anywhere (also after "thought\\n" or a channel)."""
    text = data.draw(st.sampled_from(["", "thought\n", "<|channel>thought\n", "<|channel>thought\nhm<channel|>"])) + text
    parser = R(CTX["auto"])
    for chunk in split_at(text, data.draw(st.lists(st.integers(0, len(text)), max_size=10))):
        parser.feed(chunk)
        promises = []
        if parser.plain_reasoning_guard() not in (None, *plain) and not plain[-1].isspace():
            promises.append(("", plain))
        if parser.plain_content_guard() not in (None, *plain):
            promises.append((plain, ""))
        for promise in promises:
            twin = R.restore(CTX["auto"], json.loads(json.dumps(parser.snapshot())))
            before = twin.snapshot()
            got = twin.feed(plain)
            assert (got.content, got.reasoning, got.tool_calls) == (*promise, [])
            assert twin.snapshot() == before
