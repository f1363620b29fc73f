"""The digest of output token ids a resume checkpoint carries
(``server.pipeline.checkpoint.OutputDigest``): the same however the ids were split into steps,
different for any other ids, and small."""

from __future__ import annotations

from server.pipeline.checkpoint import OutputDigest

IDS = [9707, 11, 1070, 5, 151645, 0, 198, 151644]


def test_the_digest_is_the_same_however_the_ids_were_split_into_steps() -> None:
    whole = OutputDigest(IDS).digest()
    for cut in range(len(IDS) + 1):
        d = OutputDigest(IDS[:cut])
        d.update(IDS[cut:])
        assert d.digest() == whole
    one_by_one = OutputDigest()
    for t in IDS:
        one_by_one.update([t])
    assert one_by_one.digest() == whole


def test_any_other_ids_give_another_digest_and_the_digest_stays_small() -> None:
    whole = OutputDigest(IDS).digest()
    others = [IDS[:-1], [*IDS, 0], [0, *IDS], [*IDS[:-1], IDS[-1] + 1], [IDS[1], IDS[0], *IDS[2:]],
              [*IDS[:-2], 151645, 151644], []]
    assert len({OutputDigest(ids).digest() for ids in others} | {whole}) == len(others) + 1
    assert len(whole) == 22 == len(OutputDigest(list(range(100_000))).digest())


def test_reading_the_digest_does_not_end_it() -> None:
    d = OutputDigest(IDS[:3])
    first = d.digest()
    assert d.digest() == first
    d.update(IDS[3:])
    assert d.digest() == OutputDigest(IDS).digest() != first
