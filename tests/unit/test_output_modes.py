"""The output-mode rules a table's options state (cdc_core.model.output_modes): what is accepted, and which
columns a history tracks."""

from __future__ import annotations

import pytest

from cdc_core.model.output_modes import OutputModes, tracked_columns

pytestmark = pytest.mark.unit


def test_state_alone_is_the_default_and_keeps_nothing_else() -> None:
    modes = OutputModes.parse("shop.t", None, None)
    assert not modes.any and modes.names() == ["state"]


@pytest.mark.parametrize(
    ("outputs", "track", "said"),
    [
        (["history"], None, "outputs must include 'state'"),
        ("history", None, "outputs must be a list"),
        (["state", "log"], None, "unknown outputs ['log']"),
        (["state", "changelog"], ["a"], "track only applies to a history table"),
        (["state", "history"], ["a", ""], "track must list distinct, non-empty column names"),
    ],
)
def test_bad_outputs_say_what_to_write(outputs: object, track: object, said: str) -> None:
    with pytest.raises(ValueError, match=r"'shop\.t': ") as e:
        OutputModes.parse("shop.t", outputs, track)
    assert said in str(e.value)


def test_every_column_but_the_key_is_tracked_unless_the_options_name_some() -> None:
    columns = ["id", "Tier", "visits", "_cdc_source"]
    assert tracked_columns((), columns, ("id",)) == ["Tier", "visits", "_cdc_source"]
    assert tracked_columns(("tier",), columns, ("id",)) == ["Tier"]  # spelled as the table spells it
    with pytest.raises(ValueError, match=r"track names \['email'\], which the table does not have"):
        tracked_columns(("email",), columns, ("id",))
