"""Command-line tools around runs: export, report, sweep summaries, info and the benchmark."""
