"""Decision ids: the text of a random version-4 UUID, unique per call."""

import uuid

from gateway.models import new_decision_id


def test_a_decision_id_is_a_version_4_uuid_as_uuid_writes_it():
    ids = [new_decision_id() for _ in range(4000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower case, hyphens where uuid puts them
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert len(set(ids)) == len(ids)


def test_every_random_digit_varies():
    """No digit is stuck: 122 bits come from the random source (not only some of them)."""
    ids = [new_decision_id().replace("-", "") for _ in range(4000)]
    for position in range(32):
        seen = {text[position] for text in ids}
        if position == 12:
            assert seen == {"4"}
        elif position == 16:
            assert seen == set("89ab")
        else:
            assert len(seen) == 16, position
