"""The ``manage.py`` command reference, from the command classes (Django must be set up).

Each of the project's commands is loaded as ``manage.py`` would load it, and its parser is read:
the command's ``help``, its usage, every argument it adds (Django's common options, the same for
every command, are listed once) and its subcommands with theirs. :func:`problems` names a command,
argument or subcommand without a help text.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

# The apps whose commands are ours (``demo`` only where the development packages are installed).
APPS = ("kernel", "controlplane", "fleet", "reconciler", "console", "watchers", "pki", "listener", "demo")


@dataclass
class Argument:
    names: str
    help: str
    default: str = ""
    choices: str = ""


@dataclass
class Command:
    name: str
    app: str
    help: str
    usage: str
    arguments: list[Argument] = field(default_factory=list)
    subcommands: list[Command] = field(default_factory=list)


def _common_dests() -> set[str]:
    from django.core.management.base import BaseCommand

    parser = BaseCommand().create_parser("manage.py", "command")
    return {action.dest for action in parser._actions}


def _argument(action: argparse.Action) -> Argument:
    names = ", ".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)
    if action.option_strings and action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        names += f" {' '.join(metavar) if isinstance(metavar, tuple) else metavar}"
    text = argparse.HelpFormatter("manage.py")._expand_help(action).strip() if action.help else ""
    default = ""
    if (
        action.option_strings
        and action.default not in (None, False, argparse.SUPPRESS, [], "")
        and "default" not in text
    ):
        default = str(action.default)
    choices = ", ".join(str(c) for c in action.choices) if action.choices and not _subparsers(action) else ""
    return Argument(names, text, default, choices)


def _subparsers(action: argparse.Action) -> bool:
    return isinstance(action, argparse._SubParsersAction)


def _usage(parser: argparse.ArgumentParser, skip: set[str]) -> str:
    """The usage line without ``-h`` and Django's common options (listed once, at the end)."""
    for action in parser._actions:
        if action.dest in skip or isinstance(action, argparse._HelpAction):
            action.help = argparse.SUPPRESS
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _read(parser: argparse.ArgumentParser, name: str, app: str, help_text: str, skip: set[str]) -> Command:
    command = Command(name, app, help_text.strip(), "")
    for action in parser._actions:
        if action.dest in skip or isinstance(action, argparse._HelpAction):
            continue
        if _subparsers(action):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for sub_name, sub_parser in action.choices.items():
                command.subcommands.append(_read(sub_parser, sub_name, app, helps.get(sub_name, ""), skip))
            continue
        command.arguments.append(_argument(action))
    command.usage = _usage(parser, skip)
    return command


def commands() -> list[Command]:
    """The project's commands, by name."""
    from django.core.management import get_commands, load_command_class

    skip = _common_dests()
    found: list[Command] = []
    for name, app in sorted(get_commands().items()):
        if app not in APPS:
            continue
        instance = load_command_class(app, name)
        parser = instance.create_parser("manage.py", name)
        found.append(_read(parser, name, app, str(instance.help or ""), skip))
    return found


def problems() -> list[str]:
    """Every command, subcommand and argument without a help text."""
    found: list[str] = []

    def check(command: Command, path: str) -> None:
        if not command.help:
            found.append(f"manage.py {path} has no help text")
        for argument in command.arguments:
            if not argument.help:
                found.append(f"manage.py {path}: argument {argument.names} has no help text")
        for sub in command.subcommands:
            check(sub, f"{path} {sub.name}")

    for command in commands():
        check(command, command.name)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _arguments(command: Command) -> list[str]:
    if not command.arguments:
        return []
    rows = ["| argument | meaning |", "|---|---|"]
    for argument in command.arguments:
        extra = []
        if argument.choices:
            extra.append(f"one of: {argument.choices}")
        if argument.default:
            extra.append(f"default: `{argument.default}`")
        suffix = f" ({'; '.join(extra)})" if extra else ""
        rows.append(f"| `{_cell(argument.names)}` | {_cell(argument.help)}{_cell(suffix)} |")
    return [*rows, ""]


def markdown() -> str:
    """The command reference page."""
    from django.core.management.base import BaseCommand

    found = commands()
    common = [
        _argument(a)
        for a in BaseCommand().create_parser("manage.py", "command")._actions
        if not isinstance(a, argparse._HelpAction)
    ]
    out = [
        "# `manage.py` commands",
        "",
        "The project's commands, generated from the command classes at each documentation build",
        "(`tools/docs/commands.py`): their help texts, arguments and subcommands as",
        "`python manage.py COMMAND --help` prints them. Every role's start command and the",
        "commands people and scripts rely on are here; Django's own (`migrate`, `changepassword`,",
        "`collectstatic`, ...) are documented by Django. The Celery roles start with",
        "`celery -A controlplane worker` and `celery -A controlplane beat`.",
        "",
        "| command | what it does |",
        "|---|---|",
        *[f"| [`{c.name}`](#{c.name}) | {_cell(c.help)} |" for c in found],
        "",
    ]
    for command in found:
        out += [
            f"## {command.name}",
            "",
            command.help,
            "",
            f"From the `{command.app}` app.",
            "",
            "```text",
            command.usage,
            "```",
            "",
            *_arguments(command),
        ]
        for sub in command.subcommands:
            out += [f"### {command.name} {sub.name}", "", sub.help, "", "```text", sub.usage, "```", ""]
            out += _arguments(sub)
    out += [
        "## Options of every command",
        "",
        "Django adds these to each command above.",
        "",
        *_arguments(Command("", "", "", "", common)),
    ]
    return "\n".join(out)
