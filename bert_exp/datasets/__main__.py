"""``python -m bert_exp.data download NAME...`` and ``python -m bert_exp.data list``."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..errors import UserError
from .catalog import default_data_dir, get_source, load_catalog
from .download import DownloadError, fetch, file_status, summarize

STYLE = {"present": "green", "unverified": "yellow", "incomplete": "yellow", "missing": "dim", "corrupt": "bold red"}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def list_command(args, console: Console) -> int:
    catalog = load_catalog()
    data_dir = args.data_dir or default_data_dir()
    table = Table(title=f"data sets in {data_dir}")
    for column in ("name", "status", "files", "size", "description"):
        table.add_column(column, justify="right" if column in ("files", "size") else "left")
    problems = []
    for name, source in sorted(catalog.items()):
        statuses = file_status(source, data_dir)
        state = summarize(statuses)
        here = [s for s in statuses if s.state != "missing"]
        table.add_row(name, f"[{STYLE[state]}]{state}[/]", f"{len(here)}/{len(statuses)}",
                      _size(sum(s.size for s in here)), source.description)
        problems += [(name, s) for s in statuses if s.state == "corrupt" or (args.files and s.state != "ok")]
    console.print(table)
    for name, s in problems:
        console.print(f"  {name}: [{STYLE.get(s.state, 'yellow')}]{s.state}[/] {s.path}", soft_wrap=True)
    if any(s.state == "corrupt" for _, s in problems):
        console.print("corrupt files are fetched again by: python -m bert_exp.data download NAME")
    return 0


def check_writable(data_dir: Path) -> None:
    """One message, before any download, when the data directory cannot be written."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-check-"):
            pass
    except OSError as err:
        raise DownloadError(f"cannot write to the data directory {data_dir} ({err.strerror or err}); choose "
                            "another with --data-dir or $BERT_EXP_DATA") from None


def download_command(args, console: Console) -> int:
    catalog = load_catalog()
    names = sorted(catalog) if args.names == ["all"] else args.names
    sources = [get_source(name, catalog) for name in names]  # every name checked before any download
    data_dir = args.data_dir or default_data_dir()
    check_writable(data_dir)
    for source in sources:
        console.print(f"{source.name}: {source.description}")
        outcome = fetch(source, data_dir, force=args.force, progress=not args.no_progress)
        console.print(f"{source.name}: {outcome} in {data_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.data", description="Fetch the public data sets and show what is present.")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"data directory (default: $BERT_EXP_DATA, else {default_data_dir()})")
    commands = parser.add_subparsers(dest="command", required=True)
    down = commands.add_parser("download", help="fetch data sets (verified, resumable, unpacked)")
    down.add_argument("names", nargs="+", metavar="NAME", help="catalog names (see `list`), or `all`")
    down.add_argument("--force", action="store_true", help="fetch again even when present")
    down.add_argument("--no-progress", action="store_true", help="no progress bar")
    show = commands.add_parser("list", help="what is present, missing or corrupt")
    show.add_argument("--files", action="store_true", help="also name every file that is not verified present")
    for sub in (down, show):  # accepted after the command too
        sub.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    console = Console(stderr=False)
    try:
        return (download_command if args.command == "download" else list_command)(args, console)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
