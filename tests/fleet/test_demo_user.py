"""The demo's simulated user is off by default: it never races a person's own runtime edits."""

from __future__ import annotations

from django.conf import settings

from demo.management.commands.demo import Command


def _parse(*argv: str) -> dict:
    return vars(Command().create_parser("manage.py", "demo").parse_args(list(argv)))


def test_given_no_options_when_the_demo_starts_then_the_simulated_user_makes_no_edits():
    assert _parse()["edit_every"] == 0


def test_given_edit_every_when_the_demo_starts_then_the_simulated_user_is_on():
    assert _parse("--edit-every", "30")["edit_every"] == 30


def test_the_help_and_the_readme_say_the_simulated_user_is_off_by_default():
    help_text = Command().create_parser("manage.py", "demo").format_help()
    assert "default 0: none" in " ".join(help_text.split())
    readme = (settings.BASE_DIR / "README.md").read_text()
    assert "off by default" in readme and "--edit-every 30" in readme
    assert "Every 30 s a simulated user" not in readme
