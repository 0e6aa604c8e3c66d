"""Terminal tables: wrapped to a width, whatever the cells hold."""

from streaming_dpbandit.utils.tables import format_table


def test_a_wrapped_table_keeps_formatted_numbers_as_text():
    # A column of thousands-separated counts beside a plain count: tabulate 0.10's own wrapping
    # re-parsed '1,500' as an int and raised (the service summary of a group replica crashed).
    rows = [["p01", "1,500", "x" * 60], ["p02", "0", "short"]]
    text = format_table(["bandit", "rounds", "a long header that has to wrap"], rows, width=40)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 40
    assert "1,500" in text and "short" in text
    assert "".join(line.strip() for line in lines).count("x") == 60


def test_a_table_that_fits_is_not_wrapped():
    text = format_table(["a", "bb"], [["1,000", "22"]], width=80)
    assert text.splitlines()[-1].split() == ["1,000", "22"]
