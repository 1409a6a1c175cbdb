"""The documentation holds: its relative links resolve, and the commands it shows still work.

- Every relative link in README.md and docs/**/*.md names an existing file, and a ``#anchor`` names a
  heading of its target (GitHub's slugs: lowercase, spaces to '-', punctuation dropped).
- Every ``python -m bert_exp ...`` in a fenced code block (``bash``, ``sh``, ``console`` or no
  language; a ``$ `` prompt is taken off) composes with the real config tree, as ``compose_config``
  composes it. Hydra's flags (``--cfg job``, ``-m``) and ``hydra.*`` overrides are left out; a sweep's
  comma-separated value takes its first value; a placeholder (``<run>``, ``RUN``, ``PATH``, ``...``,
  ``$VAR``) in a path key becomes a temporary directory, elsewhere its override is left out.
- Every ``python -m bert_exp.TOOL ...`` names a tool whose ``--help`` works (each tool once, in-process).
- A block shown to demonstrate an error carries ``<!-- expect-error -->`` on the last non-blank line
  before its opening fence: its commands are not composed, and it must show an ``error:`` line.
- The README's table of config groups names exactly the options in conf/ (and sweeps/), and the presets
  table of docs/configuration.md names exactly the presets in conf/experiment/.
- No page names a path outside the repository, in prose or in a code block: no absolute path (the
  development machine's ``/tmp/...`` run directories, a data copy beside the checkout) but the placeholder
  ``/path/to/...`` and the system's own (``/proc``, ``/dev/...``), and no ``../`` path that leaves the
  repository or names nothing in it. Data is named through ``$BERT_EXP_DATA`` or ``${paths.data_dir}``,
  runs as ``outputs/...`` or a placeholder (``RUN``, ``<run>``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO, compose_config

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
EXPECT_ERROR = "<!-- expect-error -->"
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
PATH_KEYS = {"task.init_from", "ckpt_path", "model.source"}
HELP_FLAGS = {"--help", "-h", "--hydra-help", "--info"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
PLACEHOLDER = re.compile(r"<[^<>]+>|\.\.\.|\$(?!\{)|(?:^|/)[A-Z][A-Z0-9_]*(?:/|$)")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# ---------------------------------------------------------------------------------------------------
# Markdown: fenced blocks, headings, links


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    lines: list[tuple[int, str]]
    expect_error: bool


def blocks(path: Path) -> list[Block]:
    found, current, fence, previous = [], None, None, ""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(text)
        if current is None:
            if match:
                fence = match.group(1)
                current = Block(path, number, match.group(2).lower(), [], previous.strip() == EXPECT_ERROR)
            elif text.strip():
                previous = text
        elif text.strip().startswith(fence[0] * len(fence)) and not text.strip().strip(fence[0]):
            found.append(current)
            current, previous = None, ""
        else:
            current.lines.append((number, text))
    assert current is None, f"{rel(path)}:{current.line}: code block never closed"
    return found


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks."""
    inside = {n for b in blocks(path) for n in range(b.line, b.lines[-1][0] + 2 if b.lines else b.line + 2)}
    return [(n, t) for n, t in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if n not in inside]


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation (backticks, commas, ...) dropped; '_' and '-' kept
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> set[str]:
    """The anchors of a file's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    found, counts = set(), {}
    for _, text in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", text)
        if match:
            base = slug(match.group(1))
            found.add(f"{base}-{counts[base]}" if counts.get(base) else base)
            counts[base] = counts.get(base, 0) + 1
    return found


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, text in prose_lines(path):
        text = re.sub(r"`[^`]*`", "", text)  # code spans are not links
        found += [(number, m.group(1)) for m in LINK.finditer(text)]
        match = REFERENCE.match(text)
        if match:
            found.append((number, match.group(1)))
    return found


@pytest.mark.parametrize("path", DOCS, ids=rel)
def test_relative_links_resolve(path):
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{rel(path)}:{number}: ({target})"
        if not resolved.exists():
            problems.append(f"{where} no such file")
        elif anchor:
            if resolved.suffix != ".md":
                problems.append(f"{where} an anchor into a file that is not Markdown")
            elif anchor not in anchors(resolved):
                problems.append(f"{where} no heading with the anchor #{anchor} in {rel(resolved)}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------
# Commands


@dataclass
class Command:
    path: Path
    line: int
    text: str
    module: str
    args: list[str]

    @property
    def where(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """The block's commands: continuation lines joined, prompts taken off."""
    joined, start, parts = [], None, []
    for number, text in block.lines:
        stripped = text.strip()
        if not parts:
            if stripped.startswith("$ "):
                stripped = stripped[2:]
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].rstrip())
            continue
        parts.append(stripped)
        joined.append((start, " ".join(parts)))
        parts = []
    if parts:
        joined.append((start, " ".join(parts)))
    return joined


def launched_module(tokens: list[str]) -> tuple[str, list[str]] | None:
    """``[VAR=value ...] [srun] python -m MODULE ARGS`` or ``torchrun ... -m MODULE ARGS``."""
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        tokens = tokens[1:]
    if tokens[:1] == ["srun"]:
        tokens = tokens[1:]
    if len(tokens) >= 3 and tokens[0] in ("python", "python3") and tokens[1] == "-m":
        return tokens[2], tokens[3:]
    if tokens[:1] == ["torchrun"] and "-m" in tokens[:-1]:
        i = tokens.index("-m")
        return tokens[i + 1], tokens[i + 2:]
    return None


def commands() -> list[Command]:
    found = []
    for path in DOCS:
        for block in blocks(path):
            if block.language not in SHELL_LANGUAGES or block.expect_error:
                continue
            for number, text in shell_lines(block):
                if text.startswith("#") or not re.search(r"(^|\s)-m\s+bert_exp\b", text):
                    continue  # a comment, another program, or output
                try:
                    tokens = shlex.split(text, comments=True)
                except ValueError as err:
                    raise AssertionError(f"{rel(path)}:{number}: cannot split {text!r}: {err}") from None
                launched = launched_module(tokens) if tokens else None
                if launched and (launched[0] == "bert_exp" or launched[0].startswith("bert_exp.")):
                    found.append(Command(path, number, text, *launched))
    return found


COMMANDS = commands()
RUNS = [c for c in COMMANDS if c.module == "bert_exp"]
TOOLS = sorted({c.module for c in COMMANDS if c.module != "bert_exp"})


def split_top_level(value: str) -> list[str]:
    """A sweep value's choices: commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for char in value:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return parts + [current]


def overrides_of(command: Command, scratch: Path) -> tuple[list[str], list[str]]:
    """(the overrides to compose, those left out), or raise for a flag we do not know."""
    multirun = any(a in ("-m", "--multirun") for a in command.args)
    overrides, left_out = [], []
    args = iter(command.args)
    for arg in args:
        if arg in ("-m", "--multirun", "--resolve", "--defaults") or arg.startswith("--cfg="):
            continue
        if arg in ("--cfg", "-c", "--package", "-p"):
            next(args, None)
            continue
        if arg.startswith("-"):
            raise AssertionError(f"{command.where}: unknown flag {arg!r} in {command.text!r}")
        key, eq, value = arg.partition("=")
        bare_key = key.lstrip("+~")
        if bare_key == "hydra" or bare_key.startswith(("hydra.", "hydra/")):
            left_out.append(arg)
            continue
        if eq and multirun:
            value = split_top_level(value)[0]
        if eq and PLACEHOLDER.search(value):
            if bare_key in PATH_KEYS:
                value = str(scratch)
            else:
                left_out.append(arg)
                continue
        overrides.append(f"{key}{eq}{value}")
    return overrides, left_out


def experiment_given(overrides: list[str]) -> bool:
    return any(o.lstrip("+~").startswith(("experiment=", "pipeline")) for o in overrides)


def test_the_docs_show_commands():
    assert len(RUNS) >= 20 and len(TOOLS) >= 8, (len(RUNS), TOOLS)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """What a placeholder path becomes: one directory for the module, so equal commands compose once."""
    return tmp_path_factory.mktemp("placeholder")


_COMPOSED: dict[tuple[str, ...], str | None] = {}  # overrides -> the error, None when they composed


def compose_error(overrides: list[str]) -> str | None:
    key = tuple(overrides)
    if key not in _COMPOSED:
        try:
            compose_config(overrides)
            _COMPOSED[key] = None
        except Exception as err:  # noqa: BLE001: any failure is the doc's
            _COMPOSED[key] = f"{type(err).__name__}: {err}"
    return _COMPOSED[key]


@pytest.mark.parametrize("command", RUNS, ids=lambda c: c.where)
def test_command_composes(command, scratch):
    args = set(command.args)
    if args & HELP_FLAGS:
        from bert_exp.runner.help import help_text

        assert "+experiment=NAME" in help_text(), command.where
        return
    overrides, left_out = overrides_of(command, scratch)
    if not experiment_given(overrides) and "--defaults" not in args and not any(a.startswith("--cfg") for a in args):
        pytest.fail(f"{command.where}: {command.text!r} names no +experiment=NAME, so it prints the presets "
                    f"and exits 2; add one, or mark the block {EXPECT_ERROR}")
    error = compose_error(overrides)
    if error:
        pytest.fail(f"{command.where}: {command.text!r} does not compose ({error})\n"
                    f"overrides composed: {overrides}; left out: {left_out}")


def tool_main(module: str):
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"no module {module}"
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        module = f"{module}.__main__"
    return importlib.import_module(module).main


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_help(tool):
    where = ", ".join(c.where for c in COMMANDS if c.module == tool)
    try:
        main = tool_main(tool)
    except (ImportError, AssertionError, AttributeError) as err:
        pytest.fail(f"python -m {tool} (shown at {where}): {err}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        with pytest.raises(SystemExit) as exit_info:
            main(["--help"])
    assert exit_info.value.code in (0, None), f"python -m {tool} --help failed (shown at {where})"
    assert "usage" in out.getvalue().lower(), f"python -m {tool} --help printed no usage (shown at {where})"


def test_expect_error_blocks_show_an_error():
    for block in (b for path in DOCS for b in blocks(path) if b.expect_error):
        assert any("error:" in text for _, text in block.lines), \
            f"{rel(block.path)}:{block.line}: marked {EXPECT_ERROR} but shows no 'error:' line"


# ---------------------------------------------------------------------------------------------------
# The tables that describe conf/


def table_rows(path: Path, header_start: str) -> list[list[str]]:
    """The cells of the table whose header row starts with ``header_start``."""
    rows, inside = [], False
    for _, text in prose_lines(path):
        if text.startswith(header_start):
            inside = True
        elif inside and text.startswith("|"):
            if not set(text) <= set("|-: "):
                rows.append([cell.strip() for cell in text.strip().strip("|").split("|")])
        elif inside:
            break
    assert rows, f"{rel(path)}: no table starting {header_start!r}"
    return rows


def test_readme_config_groups_match_conf():
    from bert_exp.resources import resource_dir

    conf = resource_dir("conf")
    for group, options, _ in table_rows(REPO / "README.md", "| group |"):
        name = group.split()[0].strip("`")
        if name == "experiment":
            continue
        folder = resource_dir("sweeps") if name == "sweeps" else conf / name
        listed = {o.strip(" `*") for o in re.sub(r"\([^)]*\)", "", options).split(",")}
        assert listed == {p.stem for p in folder.glob("*.yaml")}, f"README.md: the {name} row"


def test_presets_table_matches_conf():
    from bert_exp.resources import resource_dir

    listed = {name for first, *_ in table_rows(REPO / "docs" / "configuration.md", "| preset |")
              for name in re.findall(r"`([a-z0-9_]+)`", first)}
    assert listed == {p.stem for p in (resource_dir("conf") / "experiment").glob("*.yaml")}


# ---------------------------------------------------------------------------------------------------
# Paths: only the repository's, the data and cache directories (by their variables), and placeholders

# an absolute path: "/" and a name, not inside another path, a URL or a variable's value ($VAR/x,
# ${paths.data_dir}/x, <run>/x, ~/x, s3://x)
ABSOLUTE = re.compile(r"(?<![\w.~}\]>)/:$*\\@-])/[A-Za-z_.][\w.-]*(?:/[\w.*-]+)*/?")
ALLOWED_ABSOLUTE = re.compile(r"/path/to/|/proc(?:/|$)|/dev/")  # a placeholder; the system's own
RELATIVE_UP = re.compile(r"(?<![\w.])(?:\.\./)+[\w.*-]*(?:/[\w.*-]+)*")


def outside_paths(path: Path) -> list[str]:
    problems = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in ABSOLUTE.finditer(text):
            found = match.group(0)
            if text[match.end():match.end() + 1] == "@" or text[:match.start()].endswith("override "):
                continue  # a Hydra config path (- /settings@loader: loader, override /model: base)
            if text[:match.start()].endswith("#!"):
                continue  # a script's interpreter
            if not ALLOWED_ABSOLUTE.match(found):
                problems.append(f"{rel(path)}:{number}: {found} (an absolute path: name data as $BERT_EXP_DATA/..., "
                                "runs as outputs/... or RUN, anything else as /path/to/...)")
        for match in RELATIVE_UP.finditer(text):
            target = (path.parent / match.group(0)).resolve()
            if not (target.is_relative_to(REPO) and target.exists()):
                problems.append(f"{rel(path)}:{number}: {match.group(0)} (leaves the repository or names nothing in it)")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=rel)
def test_no_path_outside_the_repository(path):
    problems = outside_paths(path)
    assert not problems, "\n".join(problems)
