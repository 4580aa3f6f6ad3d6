"""Hypothesis strategies for events of every type with arbitrary field values, for the codec and the decoder."""

from hypothesis import strategies as st

from events.models import EVENT_TYPES, Envelope, Reason


def _fits_avro_longs(value) -> bool:
    if isinstance(value, dict):
        return all(_fits_avro_longs(v) for v in value.values())
    if isinstance(value, list):
        return all(_fits_avro_longs(v) for v in value)
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def events_of_every_type():
    """Any event of any type whose integers fit Avro's longs."""
    return st.one_of(*(
        st.builds(cls, envelope=st.builds(Envelope, reason=st.sampled_from(Reason))) for cls in EVENT_TYPES
    )).filter(lambda event: _fits_avro_longs(event.model_dump()))
