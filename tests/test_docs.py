"""README.md stays true: its settings and key tables match the code."""

from distscraper.readme_tables import README, render


def test_readme_tables_match_the_code():
    text = README.read_text()
    assert render(text) == text, "run: python -m distscraper.readme_tables"
