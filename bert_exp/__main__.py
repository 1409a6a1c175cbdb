"""``python -m bert_exp +experiment=NAME [overrides]``: a thin Hydra entry point around run.run()."""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from .runner import resolvers  # noqa: F401  (registers the config resolvers)
from .resources import resource_dir
from .errors import UserError


# Hydra prints the errors of composing the config itself (a key the config lacks among them) unless
# HYDRA_FULL_ERROR is set, when it raises them: _run sets it so they reach our answer, and the job unsets it,
# so Hydra reports a failing job as it always does
_RAISE_COMPOSITION_ERRORS = "HYDRA_FULL_ERROR"
_raising = False


@hydra.main(version_base="1.3", config_path=str(resource_dir("conf")), config_name="config")
def _main(cfg: DictConfig) -> float | None:
    if _raising:
        os.environ.pop(_RAISE_COMPOSITION_ERRORS, None)
    try:
        if "pipeline" in cfg:  # stages run as processes of their own: no Lightning here
            from .runner.pipeline import run_pipeline

            return run_pipeline(cfg)
        from .runner.run import run  # imported here so --help and --cfg stay fast

        return run(cfg)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def _run(args: list[str]) -> None:
    """Hydra's main; a config that does not compose is one line, exit code 2, as every config mistake is
    (an override of a key the config lacks: the nearest key, as the same key typed with ``+`` gets)."""
    global _raising
    if os.environ.get(_RAISE_COMPOSITION_ERRORS):  # the user's: Hydra's full errors, as asked
        _main()
        return
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ[_RAISE_COMPOSITION_ERRORS] = "1"
    _raising = True
    try:
        _main()
    except (HydraException, OmegaConfBaseException) as err:
        from .runner.overrides import unknown_override_error, unreadable_override_error

        answer = unreadable_override_error(err) or unknown_override_error(args, err)
        if answer is None:  # Hydra's own words (a malformed override, a missing config...)
            cause = err.__cause__
            answer = str(err).strip() + (f"\n{cause}" if isinstance(cause, OmegaConfBaseException) else "")
        print(f"error: {answer}", file=sys.stderr)
        sys.exit(2)
    finally:
        _raising = False
        os.environ.pop(_RAISE_COMPOSITION_ERRORS, None)


def _cfg_type(argv: list[str]) -> str | None:
    """What ``--cfg``/``-c`` asks to print (job, hydra, all), None without it."""
    for i, arg in enumerate(argv):
        if arg in ("--cfg", "-c"):
            return argv[i + 1] if i + 1 < len(argv) else "job"
        if arg.startswith("--cfg="):
            return arg.split("=", 1)[1]
    return None


def _experiment_given(args: list[str]) -> bool:
    return any(a.lstrip("+~").startswith(("experiment=", "pipeline")) for a in args)


def main() -> None:
    args = sys.argv[1:]
    if "--help" in args or "-h" in args:  # our groups and presets; Hydra's: --hydra-help
        from .runner.help import help_text

        print(help_text(args))
        return
    from .runner.config_search import export_to_children
    from .runner.help import unknown_choice

    export_to_children(args)  # the jobs this command starts read the same config directories

    mistake = unknown_choice(args)  # a mistyped preset or option: one line, not Hydra's list of them all
    if mistake:
        print(f"error: {mistake}", file=sys.stderr)
        sys.exit(2)
    cfg_type = _cfg_type(args)
    multirun = "-m" in args or "--multirun" in args
    if cfg_type is not None and multirun:  # Hydra refuses both: each job's config, composed here
        from .runner.sweep_configs import print_sweep_configs

        sys.exit(print_sweep_configs([a for a in args if a not in ("-m", "--multirun", "--resolve")], cfg_type))
    if "--defaults" in args:  # the defaults alone, on purpose
        sys.argv.remove("--defaults")
    elif not _experiment_given(args) and cfg_type is None and not any(a.startswith("--") for a in args):
        # without a preset the defaults train a tiny model on the corpus with no step limit
        from .runner.help import help_text

        print(help_text(args), file=sys.stderr)
        print("\nerror: no experiment chosen: add +experiment=NAME (one of the presets above), or --defaults "
              "to run the defaults alone", file=sys.stderr)
        sys.exit(2)
    # `--cfg job` shows the config as it will run: interpolations resolved (Hydra's --resolve); Hydra's
    # own config refers to the job's keys, which `--cfg hydra` does not have: printed as written
    if cfg_type in ("job", "all") and "--resolve" not in sys.argv:
        sys.argv.append("--resolve")
    _run(args)


if __name__ == "__main__":
    main()
